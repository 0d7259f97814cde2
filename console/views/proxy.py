"""`/proxy/<instance>/<port>/…` (or, in subdomain mode, `<port>-<instance>.<base domain>/…`): the platform's
authenticating reverse proxy to an instance's HTTP ports.

HTTP here (httpx, streamed both ways); the WebSocket upgrade of the same paths is console/consumers/proxy.py.
The upstream sees the path the browser asked for, the prefix kept (http_ports.py), without the platform's
cookies; JupyterLab's port gets its token as an Authorization header, so the user copies none.
"""
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlencode

import asyncssh
import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import (
    Http404,
    HttpResponse,
    HttpResponseNotFound,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.utils.encoding import escape_uri_path
from django.utils.translation import gettext
from django.views.decorators.csrf import csrf_exempt

from core.errors import NotFoundError
from provisioning.host_keys import HostKeyMismatch
from provisioning.http_ports import SHARE_PARAM, port_path, subdomain_mode, upstream_path

from .. import port_grants, port_tunnels
from .. import proxy_access as access

# Hop-by-hop headers (RFC 9110 §7.6.1) and the ones the proxy sets itself.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host", "cookie", "authorization", "content-length"})
RESPONSE_DROPPED = frozenset({"connection", "keep-alive", "proxy-authenticate", "trailer", "transfer-encoding",
                              "upgrade", "set-cookie"})


async def upstream_address(target) -> tuple[str, int]:
    """Where the port is reached from here: its published address, or a local SSH forward (port_tunnels.py)."""
    if target.tunnel is not None:
        return await port_tunnels.local_address(target)
    return target.host, target.upstream_port


def upstream_headers(headers, *, cookie: str, token: str | None, host: str, origin_host: str) -> dict:
    """The request's headers as the upstream gets them: hop-by-hop ones and the platform's cookies dropped,
    the upstream's Host and Origin (the app checks them against each other), the JupyterLab token added."""
    out = {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}
    out.pop("Origin", None)
    kept = access.cookie_header_without_platform(cookie)
    if kept:
        out["Cookie"] = kept
    if "origin" in {k.lower() for k in headers}:
        out["Origin"] = f"http://{host}"
    out["Host"] = host
    out["X-Forwarded-Host"] = origin_host
    if token:
        out["Authorization"] = f"token {token}"
    return out


def _share(request) -> str:
    return request.GET.get(SHARE_PARAM) or access.share_cookie_value(request.headers.get("Cookie", ""))


def _target(request, instance_id, port):
    try:
        return access.port_target(user=request.user, session=request.session, instance_id=instance_id, port=port,
                                  share_secret=_share(request))
    except NotFoundError as exc:
        raise Http404(exc.message) from exc


def _host_target(request, instance_id, port):
    return port_grants.host_target(cookie=request.headers.get("Cookie", ""), share_secret=request.GET.get(SHARE_PARAM, ""),
                                   instance_id=instance_id, port=port)


def _without_share_param(request, path: str):
    query = urlencode([(k, v) for k, vs in request.GET.lists() if k != SHARE_PARAM for v in vs])
    return HttpResponseRedirect(path + (f"?{query}" if query else ""))


def _share_redirect(request, cookie_path: str):
    """A share link's first request: its secret into a cookie scoped to the port, the address cleaned."""
    response = _without_share_param(request, request.path)
    response.set_cookie(access.SHARE_COOKIE, request.GET[SHARE_PARAM], path=cookie_path,
                        httponly=True, samesite="Lax", secure=request.is_secure())
    return response


def _upstream_cookies(response, lines, *, prefix: str) -> None:
    """The instance's Set-Cookie lines, kept to its own path: never one of the platform's names (an instance must
    not replace the visitor's session), never outside the port's prefix, never for a wider domain than its own
    host (on a port's subdomain, a `Domain=` cookie would reach every other instance's)."""
    jar = SimpleCookie()
    for line in lines:
        try:
            jar.load(line)
        except CookieError:
            continue  # a cookie Python cannot represent is dropped, not a 500
    for name, morsel in jar.items():
        if name in access.platform_cookie_names():
            continue
        if not (morsel["path"] or "").startswith(prefix):
            morsel["path"] = prefix
        morsel["domain"] = ""
        response.cookies[name] = morsel


async def _stream(upstream: httpx.Response, client: httpx.AsyncClient):
    try:
        async for chunk in upstream.aiter_raw():
            yield chunk
    finally:
        await upstream.aclose()
        await client.aclose()


async def _forward(request, target, *, path: str, cookie_prefix: str):
    """Send the request to the target's port at `path` (the query kept); stream the answer back."""
    try:
        host = "%s:%s" % await upstream_address(target)
    except (OSError, asyncssh.Error, HostKeyMismatch) as exc:
        return HttpResponse(gettext("Port %(port)s of the instance cannot be reached through its sshd: %(error)s")
                            % {"port": target.port, "error": exc},
                            status=502, content_type="text/plain; charset=utf-8")
    headers = upstream_headers(request.headers, cookie=request.headers.get("Cookie", ""), token=target.jupyter_token,
                               host=host, origin_host=request.get_host())
    body = await sync_to_async(lambda: request.body)()
    query = request.META.get("QUERY_STRING", "")
    client = httpx.AsyncClient(timeout=settings.PROXY_UPSTREAM_TIMEOUT_SECONDS, follow_redirects=False)
    try:
        upstream = await client.send(client.build_request(request.method, f"http://{host}{escape_uri_path(path)}"
                                                          + (f"?{query}" if query else ""),
                                                          headers=headers, content=body), stream=True)
    except httpx.HTTPError:
        await client.aclose()
        return HttpResponse(gettext("Port %(port)s of the instance does not answer.") % {"port": target.port}, status=502,
                            content_type="text/plain; charset=utf-8")
    response = StreamingHttpResponse(_stream(upstream, client), status=upstream.status_code)
    for name, value in upstream.headers.multi_items():
        if name.lower() not in RESPONSE_DROPPED:
            response[name] = value
    _upstream_cookies(response, upstream.headers.get_list("set-cookie"), prefix=cookie_prefix)
    return response


@csrf_exempt  # the instance's app has its own (e.g. Jupyter's _xsrf); the platform's cookies never reach it
async def proxy(request, instance_id, port, rest=""):
    """Forward one request to the instance's port, or 404 when the caller may not reach it. In subdomain mode
    the platform's origin serves no port at all (port_host below does)."""
    if subdomain_mode():
        raise Http404(gettext("Ports are served on their own hosts."))
    port = int(port)
    target = await sync_to_async(_target)(request, instance_id, port)
    if request.GET.get(SHARE_PARAM):
        return _share_redirect(request, port_path(instance_id, port))
    return await _forward(request, target, path=request.path, cookie_prefix=port_path(instance_id, port))


def _not_found():
    # Plain: the console's 404 page needs middleware a port's host does not run.
    return HttpResponseNotFound(gettext("Not found."), content_type="text/plain; charset=utf-8")


async def port_host(request, instance_id: str, port: int):
    """Subdomain mode: a request to `<port>-<instance>.<base domain>` (console/port_hosts.py sends it here). The
    console's hand-off path trades a ticket for this host's grant cookie; a share link works as on a path;
    anything else needs the grant or the share cookie, or is a 404."""
    request.get_host()  # ALLOWED_HOSTS applies here too (DisallowedHost: a 400)
    if request.path == port_grants.AUTH_PATH:
        try:
            grant, next_path = await sync_to_async(port_grants.ticket_redeem)(
                request.GET.get("ticket", ""), instance_id=instance_id, port=port)
        except NotFoundError:
            return _not_found()
        response = HttpResponseRedirect("/" + next_path.lstrip("/"))
        response.set_cookie(port_grants.GRANT_COOKIE, grant, max_age=settings.PROXY_GRANT_SECONDS, path="/",
                            httponly=True, samesite="Lax", secure=request.is_secure())
        return response
    try:
        target = await sync_to_async(_host_target)(request, instance_id, port)
    except NotFoundError:
        return _not_found()
    if request.GET.get(SHARE_PARAM):
        return _share_redirect(request, "/")
    return await _forward(request, target, path=upstream_path(instance_id, port, request.path), cookie_prefix="/")
