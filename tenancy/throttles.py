"""Rate limits: per API token (scope `token`), and per client IP for sign-up and login."""
import logging

from rest_framework.throttling import SimpleRateThrottle

from .models import ApiToken


class TokenRateThrottle(SimpleRateThrottle):
    """Throttles token-authenticated API calls per token (DEFAULT_THROTTLE_RATES["token"])."""

    scope = "token"

    def get_cache_key(self, request, view):
        token = getattr(request, "auth", None)
        if not isinstance(token, ApiToken):
            return None  # sessions and anonymous calls are not throttled here
        return self.cache_format % {"scope": self.scope, "ident": token.pk}

    def allow_request(self, request, view):
        # Faults (issue 14): a cache (Redis) outage must not take the authenticated API down with it;
        # the per-token limit is a fairness guard, so it fails open. Login/sign-up limits fail closed (503).
        from redis.exceptions import RedisError

        try:
            return super().allow_request(request, view)
        except RedisError:
            logging.getLogger("cardmix.api").warning("token throttle skipped: cache unavailable")
            return True


class _IpThrottle(SimpleRateThrottle):
    """Keyed by client IP; also works on a plain Django request (the console forms)."""

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class SignupRateThrottle(_IpThrottle):
    scope = "signup"


class LoginRateThrottle(_IpThrottle):
    scope = "login"
