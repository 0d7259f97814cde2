"""The tests' cache clearing deletes only this run's keys: other runs on the same Redis keep theirs."""
import uuid

import pytest
from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache

from tests.cachekeys import cache_clear_own, own_key_pattern


@pytest.mark.redis
def test_clearing_deletes_this_runs_keys_and_leaves_another_runs_in_the_same_redis_db():
    cache = caches["default"]
    assert isinstance(cache, RedisCache), "REDIS_URL is set: the cache is Redis"
    client = cache._cache.get_client(write=True)
    ours = f"ours-{uuid.uuid4().hex}"
    # Another run's throttle counter: same Redis database, another prefix (bin/test: cardmix-test-<pid>).
    other = f"{cache.key_prefix}x-other-{uuid.uuid4().hex}:1:throttle_login_127.0.0.1"
    unprefixed = f"no-prefix-{uuid.uuid4().hex}"
    try:
        cache.set(ours, 1, 60)
        client.set(other, b"1", ex=60)
        client.set(unprefixed, b"1", ex=60)
        assert cache.get(ours) == 1
        assert cache_clear_own() >= 1
        assert cache.get(ours) is None
        assert client.get(other) == b"1" and client.get(unprefixed) == b"1"
    finally:
        client.delete(other, unprefixed)


def test_the_pattern_is_the_prefix_with_glob_characters_escaped():
    cache = LocMemCache("x", {"KEY_PREFIX": "run*[1]?"})
    assert own_key_pattern(cache) == "run\\*\\[1\\]\\?:*"


def test_a_local_memory_cache_is_cleared():
    cache = LocMemCache(f"test-{uuid.uuid4().hex}", {})
    cache.set("k", 1)
    cache_clear_own(cache)
    assert cache.get("k") is None
