"""Django's Redis cache with one connection pool per process and server, not one per cache object.

Django makes a cache object per thread, and under ASGI per request (its cache handler is context-local), and
each object made its own redis-py connection pool: every API request behind uvicorn opened a new TCP
connection to Redis for its throttle (and closed it when the pool was collected). redis-py's pool is
thread-safe and resets itself in a forked child, so one per process serves every cache object.
"""
import threading

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

_POOLS: dict = {}
_POOLS_LOCK = threading.Lock()


class SharedPoolRedisCacheClient(RedisCacheClient):
    def _get_connection_pool(self, write):
        server = self._servers[self._get_connection_pool_index(write)]
        key = (self._pool_class, server, repr(sorted(self._pool_options.items())))
        pool = _POOLS.get(key)
        if pool is None:
            with _POOLS_LOCK:
                pool = _POOLS.get(key)
                if pool is None:
                    pool = _POOLS[key] = self._pool_class.from_url(server, **self._pool_options)
        return pool


class SharedPoolRedisCache(RedisCache):
    """settings.CACHES BACKEND "core.cache.SharedPoolRedisCache": RedisCache with per-process pools."""

    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = SharedPoolRedisCacheClient
