"""Clearing the cache between tests without touching other test runs' keys.

`cache.clear()` on Django's Redis cache is FLUSHDB: it wipes the whole Redis database, so a run clearing its
throttle counters wiped those of every other run on that Redis (bin/test gives each run its own
CACHE_KEY_PREFIX, which clear() ignores). `cache_clear_own()` deletes only the keys under this cache's prefix.
"""
from django.core.cache import DEFAULT_CACHE_ALIAS, caches
from django.core.cache.backends.redis import RedisCache

_GLOB_SPECIAL = "\\*?[]"


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in _GLOB_SPECIAL else ch for ch in text)


def own_key_pattern(cache=None) -> str:
    """The Redis glob of every key this cache makes: Django's default key function writes
    `<KEY_PREFIX>:<version>:<key>`."""
    cache = cache if cache is not None else caches[DEFAULT_CACHE_ALIAS]
    return _glob_escape(cache.key_prefix) + ":*"


def cache_clear_own(cache=None) -> int:
    """Delete this cache's own keys (its key prefix) and nothing else; returns how many were deleted.

    Redis: SCAN for the prefix and UNLINK what it finds, on the primary (the client Django writes with).
    Any other backend (the local-memory cache, private to this process) is simply cleared (returns 0)."""
    cache = cache if cache is not None else caches[DEFAULT_CACHE_ALIAS]  # the backend, not the proxy
    if not isinstance(cache, RedisCache):
        cache.clear()
        return 0
    client = cache._cache.get_client(write=True)
    deleted, batch = 0, []
    for key in client.scan_iter(match=own_key_pattern(cache), count=1000):
        batch.append(key)
        if len(batch) >= 500:
            deleted += client.unlink(*batch)
            batch = []
    if batch:
        deleted += client.unlink(*batch)
    return deleted
