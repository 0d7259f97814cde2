"""Rate limits: per API token (scope `token`), and per client IP for sign-up and login."""
import logging
import math

from django.core.cache import DEFAULT_CACHE_ALIAS, caches
from rest_framework.throttling import SimpleRateThrottle

from core.cache import window_count, window_uncount

from .models import ApiToken


class WindowCounterThrottle(SimpleRateThrottle):
    """DRF's SimpleRateThrottle with counts that concurrent requests cannot lose.

    DRF keeps the time of every request in one cache value and writes the list back whole: requests that read it
    at the same moment each add themselves to their own copy and the last write wins, so concurrent requests were
    barely counted (20 clients released together against 50/min got 357–399 of 400 through: the API's token
    limit and the console's login and sign-up limits alike), and a busy token's list (up to 6,000 times) went
    through pickle both ways on every request. This is the sliding-window counter: an atomic count per fixed window, and the previous
    window's count weighed by the share of it the sliding window still covers. A refused request is not counted,
    as in DRF."""

    @property
    def cache(self):
        # The backend itself: DRF's `cache` is Django's proxy, which window_count cannot tell from any other cache
        # (Redis counts in one round trip, the generic path in four).
        return caches[DEFAULT_CACHE_ALIAS]

    def allow_request(self, request, view):
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        self.now = self.timer()
        window, into = divmod(self.now, self.duration)
        self.window = int(window)
        current, previous = window_count(self.cache, self.key, self.window, 2 * self.duration + 1)
        self.counts = (current - 1, previous, into)  # before this request
        if previous * (1 - into / self.duration) + current <= self.num_requests:
            return True
        window_uncount(self.cache, self.key, self.window)
        return self.throttle_failure()

    def wait(self):
        """Seconds until one more request fits: the previous window's weight falls as time goes on, and the
        current window becomes the previous one when it ends."""
        current, previous, into = self.counts
        limit, duration = self.num_requests, self.duration
        if current + 1 <= limit:  # this window has room once the previous one weighs little enough
            at = duration * (1 - (limit - current - 1) / previous) if previous else into
            return max(round(at - into, 6), 1)
        # Full: in the next window this one weighs in the way the previous one does now.
        at = duration * (1 - (limit - 1) / current) if limit > 0 else 0  # here current ≥ limit
        return max(math.ceil(round(duration - into + at, 6)), 1)  # round: 60 × (1 − 2/3) is 20.000000000000004


class TokenRateThrottle(WindowCounterThrottle):
    """Throttles token-authenticated API calls per token (DEFAULT_THROTTLE_RATES["token"])."""

    scope = "token"

    def get_cache_key(self, request, view):
        token = getattr(request, "auth", None)
        if not isinstance(token, ApiToken):
            return None  # sessions and anonymous calls are not throttled here
        return self.cache_format % {"scope": self.scope, "ident": token.pk}

    def allow_request(self, request, view):
        # Faults: a cache (Redis) outage must not take the authenticated API down with it;
        # the per-token limit is a fairness guard, so it fails open. Login/sign-up limits fail closed (503).
        from redis.exceptions import RedisError

        try:
            return super().allow_request(request, view)
        except RedisError:
            logging.getLogger("cardmix.api").warning("token throttle skipped: cache unavailable")
            return True


class _IpThrottle(WindowCounterThrottle):
    """Keyed by client IP; also works on a plain Django request (the console forms)."""

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class SignupRateThrottle(_IpThrottle):
    scope = "signup"


class LoginRateThrottle(_IpThrottle):
    scope = "login"
