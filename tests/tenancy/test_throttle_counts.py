"""The rate limits count every request, however many arrive at once (tenancy.throttles.WindowCounterThrottle on
core.cache.window_count): DRF's throttle read and wrote back one list per key, so concurrent requests overwrote
each other's counts and a client with many connections went far past its limit."""
import threading
from types import SimpleNamespace

import pytest
from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache
from rest_framework.throttling import SimpleRateThrottle

from core.cache import window_count, window_uncount
from tenancy.throttles import WindowCounterThrottle

pytestmark = [pytest.mark.redis]

LIMIT, ATTEMPTS, THREADS = 50, 400, 20


def _throttle_class(base, key):
    class Fixed(base):
        scope = "test"
        THROTTLE_RATES = {"test": f"{LIMIT}/min"}

        def get_cache_key(self, request, view):
            return key

    return Fixed


def _allowed_at_once(throttle_class) -> int:
    """How many of ATTEMPTS requests, THREADS at a time released together, the throttle lets through."""
    allowed, lock, barrier = [0], threading.Lock(), threading.Barrier(THREADS)

    def client():
        for _ in range(ATTEMPTS // THREADS):
            barrier.wait()
            if throttle_class().allow_request(SimpleNamespace(), None):
                with lock:
                    allowed[0] += 1

    threads = [threading.Thread(target=client) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return allowed[0]


def test_concurrent_requests_get_exactly_the_limit():
    assert type(caches["default"]).__module__ == "core.cache"  # the Redis of the test run
    assert _allowed_at_once(_throttle_class(WindowCounterThrottle, "throttle-test-ours")) == LIMIT


def test_on_redis_a_request_is_counted_in_one_round_trip(monkeypatch):
    from redis.client import Pipeline

    trips = []
    real_execute = Pipeline.execute

    def execute(self, *args, **kwargs):
        trips.append(len(self.command_stack))
        return real_execute(self, *args, **kwargs)

    monkeypatch.setattr(Pipeline, "execute", execute)
    assert _throttle_class(WindowCounterThrottle, "throttle-test-trips")().allow_request(SimpleNamespace(), None)
    assert trips == [3]  # INCR, EXPIRE and the previous window's GET, sent together


def test_drfs_own_throttle_loses_counts_under_the_same_load():
    """The control: DRF's list-per-key throttle, which WindowCounterThrottle replaces, lets more through."""
    assert _allowed_at_once(_throttle_class(SimpleRateThrottle, "throttle-test-drf")) > LIMIT


def test_the_previous_window_weighs_in_by_its_overlap_and_retry_after_says_when():
    clock = [600.0 + 50]  # 50 s into window 10 of 60 s
    limited = _throttle_class(WindowCounterThrottle, "throttle-test-slide")
    limited.THROTTLE_RATES = {"test": "3/min"}

    def attempt():
        throttle = limited()
        throttle.timer = lambda: clock[0]
        return throttle.allow_request(SimpleNamespace(), None), throttle

    assert [attempt()[0] for _ in range(3)] == [True, True, True]
    ok, throttle = attempt()
    # Full: 10 s to the next window, then 20 s until these 3 weigh 2 (3 × 40/60) and one more fits.
    assert not ok and throttle.wait() == 30
    clock[0] = 660.0 + 10  # 10 s into window 11: the previous 3 weigh 3 × 50/60 = 2.5, + 1 = 3.5 > 3
    ok, throttle = attempt()
    assert not ok and throttle.wait() == pytest.approx(10)  # at 20 s they weigh 2: room for one
    clock[0] = 660.0 + 20
    assert attempt()[0]
    assert not attempt()[0]  # the refused ones were not counted: exactly one fitted


def test_the_count_works_on_a_cache_without_redis():
    cache = LocMemCache("throttle-test", {})
    assert window_count(cache, "k", 5, 10) == (1, 0)
    assert window_count(cache, "k", 5, 10) == (2, 0)
    window_uncount(cache, "k", 5)
    assert window_count(cache, "k", 6, 10) == (1, 1)
    window_uncount(cache, "k", 99)  # nothing to take back: no error
