"""Subdomain mode's sign-in on a port's own origin (settings.PROXY_MODE = "subdomain").

The platform's session cookie stays on the console's host. To open a port, the console (where the session is)
issues a ticket — random, single-use, valid TICKET_SECONDS — and sends the browser to the port's host, which
trades it for a grant: a cookie of that host only (no Domain, HttpOnly) naming a record kept here, in the shared
cache. Every request on the port re-checks the grant: the console session it came from is still signed in as the
same user (a logout or password change ends it), and that user may still use the instance in that organization
(a removed or demoted member gets 404). The app behind the port never sees the grant cookie.
"""
import secrets
from importlib import import_module

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.core.cache import cache
from django.utils.crypto import constant_time_compare
from django.utils.translation import gettext

from core.errors import NotFoundError
from provisioning import selectors
from tenancy.middleware import SESSION_ORG_KEY

from .proxy_access import GRANT_COOKIE, SHARE_COOKIE, cookie_value, member_instance

TICKET_SECONDS = 60
__all__ = ["GRANT_COOKIE", "AUTH_PATH", "ticket_issue", "ticket_redeem", "grant_target", "host_target"]
AUTH_PATH = "/__cardmix_auth__"  # on a port's host: where a ticket is traded for the grant cookie
_TICKET = "port-ticket:"
_GRANT = "port-grant:"


def ticket_issue(*, user, session_key: str, org_id, instance_id, port: int, next_path: str) -> str:
    """A one-minute, single-use ticket that signs the browser in on the port's host."""
    ticket = secrets.token_urlsafe(32)
    cache.set(_TICKET + ticket, {"user_id": str(user.pk), "session_key": session_key, "org_id": str(org_id),
                                 "instance_id": str(instance_id), "port": port, "next": next_path},
              timeout=TICKET_SECONDS)
    return ticket


def ticket_redeem(ticket: str, *, instance_id: str, port: int) -> tuple[str, str]:
    """(grant id, the path to go on to) for a ticket issued for this very port; NotFoundError when it is unknown,
    spent, expired or for another port. Only the first redeemer wins (the cache's delete says who deleted it)."""
    key = _TICKET + (ticket or "")[:64]
    data = cache.get(key)
    if not data or not cache.delete(key) or (data["instance_id"], data["port"]) != (str(instance_id), port):
        raise NotFoundError(gettext("No such port."))
    grant = secrets.token_urlsafe(32)
    cache.set(_GRANT + grant, {k: data[k] for k in ("user_id", "session_key", "org_id", "instance_id", "port")},
              timeout=settings.PROXY_GRANT_SECONDS)
    return grant, data["next"]


def grant_target(grant: str, *, instance_id: str, port: int) -> selectors.ProxyTarget:
    """Where this grant's holder is forwarded on the port, or NotFoundError (unknown grant, another port, the
    console session ended, the member no longer allowed, the port gone)."""
    data = cache.get(_GRANT + (grant or "")[:64]) if grant else None
    if not data or (data["instance_id"], data["port"]) != (str(instance_id), port):
        raise NotFoundError(gettext("No such port."))
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key=data["session_key"])
    user = get_user_model().objects.filter(pk=data["user_id"], is_active=True).first()
    if (user is None or session.get(SESSION_KEY) != data["user_id"]
            or not constant_time_compare(session.get(HASH_SESSION_KEY, ""), user.get_session_auth_hash())):
        raise NotFoundError(gettext("No such port."))
    instance = member_instance(user=user, session={SESSION_ORG_KEY: data["org_id"]}, instance_id=instance_id)
    if str(instance.organization_id) != data["org_id"]:
        raise NotFoundError(gettext("No such port."))
    return selectors.proxy_target(instance=instance, port=port)


def host_target(*, cookie: str, share_secret: str, instance_id: str, port: int) -> selectors.ProxyTarget:
    """Who may reach a port on its own host: a live share link (in the query or its cookie), else this host's
    grant cookie — never the platform's session, even if a misconfigured cookie domain sent it along."""
    share = selectors.port_share_active(instance_id=instance_id, port=port,
                                        secret=share_secret or cookie_value(cookie, SHARE_COOKIE))
    if share:
        return selectors.proxy_target(instance=share.instance, port=port)
    return grant_target(cookie_value(cookie, GRANT_COOKIE), instance_id=instance_id, port=port)
