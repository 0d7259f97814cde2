"""The client's address, the same for login lockout (axes), throttles (DRF) and the audit log.

Behind NUM_PROXIES trusted reverse proxies, each appends the address it saw to X-Forwarded-For, so the
client is the NUM_PROXIES-th entry from the right; anything further left was written by the client and is
not trusted. With NUM_PROXIES = 0 (no proxy) X-Forwarded-For is ignored and REMOTE_ADDR is the client.
This is DRF's own rule (SimpleRateThrottle.get_ident), so all three agree."""
import ipaddress

from django.conf import settings


def client_ip(request) -> str | None:
    if request is None:
        return None
    remote = request.META.get("REMOTE_ADDR")
    proxies = getattr(settings, "NUM_PROXIES", 0)
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if proxies > 0 and forwarded:
        addresses = [a.strip() for a in forwarded.split(",") if a.strip()]
        if addresses:
            chosen = addresses[-min(proxies, len(addresses))]
            try:  # with NUM_PROXIES set too high the entry is the client's own text: never store that
                return str(ipaddress.ip_address(chosen))
            except ValueError:
                return remote
    return remote
