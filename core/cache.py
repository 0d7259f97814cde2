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


def window_count(cache, key: str, window: int, ttl: int) -> tuple[int, int]:
    """Counts one event in fixed window `window` of `key` (atomically: concurrent callers never lose a count) and
    returns (that window's count with it, the previous window's count). On Redis one round trip (INCR, EXPIRE, GET
    in a pipeline); on any other Django cache, its atomic add and incr."""
    current, previous = f"{key}:{window}", f"{key}:{window - 1}"
    if isinstance(cache, SharedPoolRedisCache):
        client = cache._cache.get_client(write=True)
        counted = cache.make_and_validate_key(current)
        pipe = client.pipeline(transaction=False)
        pipe.incr(counted)
        pipe.expire(counted, ttl)
        pipe.get(cache.make_and_validate_key(previous))
        now, _, before = pipe.execute()
        return int(now), int(before or 0)  # Django's Redis serializer stores ints as plain numbers
    cache.add(current, 0, timeout=ttl)
    return cache.incr(current), int(cache.get(previous) or 0)


def window_uncount(cache, key: str, window: int) -> None:
    """Takes back one event counted by window_count (a refused request)."""
    current = f"{key}:{window}"
    if isinstance(cache, SharedPoolRedisCache):
        cache._cache.get_client(write=True).decr(cache.make_and_validate_key(current))
        return
    try:
        cache.decr(current)
    except ValueError:  # expired in between: nothing left to take back
        pass
