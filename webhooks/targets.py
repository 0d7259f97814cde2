"""Where a webhook may go: no loopback, private, link-local or otherwise internal address (SSRF).

Checked when an endpoint is registered and again before every attempt (a name can be re-pointed at an
internal address after registration). Hosts in WEBHOOK_ALLOWED_HOSTS skip the address check: an explicit
operator allow-list (tests use it for their loopback receiver).
"""
import socket
from urllib.parse import urlsplit

from django.conf import settings

from core.addresses import address_internal, host_addresses
from core.errors import ValidationFailed


def _refuse(message: str):
    raise ValidationFailed(message, details={"url": [message]})


def target_check(url: str, *, resolve=socket.getaddrinfo) -> str:
    """The URL if it may receive webhooks; else ValidationFailed naming `url`."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        _refuse("Use an absolute http(s) URL.")
    if parts.username or parts.password:
        _refuse("Put no credentials in the URL; verify the signature instead.")
    if settings.WEBHOOK_REQUIRE_HTTPS and parts.scheme != "https":
        _refuse("Webhook URLs must use https.")
    host = parts.hostname.lower()
    if host in {h.lower() for h in settings.WEBHOOK_ALLOWED_HOSTS}:
        return url
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        _refuse("The port is not a number between 1 and 65535.")
    try:
        addresses = host_addresses(host, port, resolve=resolve)
    except (socket.gaierror, UnicodeError):
        _refuse(f"The host {host!r} does not resolve.")
    if not addresses or any(address_internal(a) for a in addresses):
        _refuse("The URL points at a loopback, private or link-local address; webhooks only go to public hosts.")
    return url
