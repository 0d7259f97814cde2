"""Who may open an instance's HTTP port or shell through the platform: one answer for HTTP and WebSockets.

A console session of a member whose role may use instances (owner, admin, member), in the session's current
organization, or for one port a live share link. Anything else (another organization's session, a viewer, no
session, an expired or revoked link, a port the instance does not declare) is NotFoundError: a 404, never a
hint that the instance exists.
"""
from http.cookies import SimpleCookie

from django.conf import settings
from django.utils.translation import gettext

from core.errors import NotFoundError
from provisioning import selectors
from provisioning.choices import InstanceState
from tenancy.middleware import SESSION_ORG_KEY
from tenancy.permissions import role_can
from tenancy.selectors import membership_for_session

# A share link carries its secret once in the query (http_ports.SHARE_PARAM); the proxy moves it into this cookie,
# scoped to the port's path, and redirects, so the secret leaves the address bar and the upstream never sees it.
SHARE_COOKIE = "cardmix_share"
# Subdomain mode: the cookie of a port's own host naming its grant (port_grants.py).
GRANT_COOKIE = "cardmix_port"


def member_instance(*, user, session, instance_id):
    """The instance, when the session's member may use it; else NotFoundError."""
    if user is None or not user.is_authenticated:
        raise NotFoundError(gettext("No such instance."))
    membership = membership_for_session(user=user, org_id=session.get(SESSION_ORG_KEY))
    if membership is None or not role_can(membership.role, "instances"):
        raise NotFoundError(gettext("No such instance."))
    return selectors.instance_get(org=membership.organization, instance_id=instance_id)


def port_target(*, user, session, instance_id, port: int, share_secret: str = "") -> selectors.ProxyTarget:
    """Where the proxy forwards this caller's request for the instance's port; NotFoundError when not theirs."""
    share = selectors.port_share_active(instance_id=instance_id, port=port, secret=share_secret)
    instance = share.instance if share else member_instance(user=user, session=session, instance_id=instance_id)
    return selectors.proxy_target(instance=instance, port=port)


def running_instance(*, user, session, instance_id):
    """The web terminal's instance: the member's, and running."""
    instance = member_instance(user=user, session=session, instance_id=instance_id)
    if instance.state != InstanceState.RUNNING:
        raise NotFoundError(gettext("The instance is not running."))
    return instance


def platform_cookie_names() -> frozenset[str]:
    """The platform's own cookies, which never travel to an instance."""
    return frozenset({settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME, SHARE_COOKIE, GRANT_COOKIE})


def cookie_header_without_platform(header: str) -> str:
    """A Cookie header with the platform's cookies taken out (the instance's own, e.g. Jupyter's _xsrf, stay)."""
    kept = []
    for part in header.split(";"):
        name = part.split("=", 1)[0].strip()
        if name and name not in platform_cookie_names():
            kept.append(part.strip())
    return "; ".join(kept)


def cookie_value(header: str, name: str) -> str:
    """One cookie's value in a Cookie header ('' when none)."""
    jar = SimpleCookie()
    try:
        jar.load(header or "")
    except Exception:  # noqa: BLE001 - a malformed Cookie header carries nothing
        return ""
    morsel = jar.get(name)
    return morsel.value if morsel else ""


def share_cookie_value(header: str) -> str:
    """The share secret in a Cookie header ('' when none)."""
    return cookie_value(header, SHARE_COOKIE)
