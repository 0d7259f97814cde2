"""Subdomain mode (PROXY_MODE=subdomain): each port on `<port>-<instance hex>.<base domain>`, its own origin.

A real uvicorn serves both the console (127.0.0.1:<port>) and the ports' hosts (`*.localhost:<port>`: the test
connects to 127.0.0.1 and names the host in the Host header, as a wildcard DNS name would); behind the instance
a real jupyter-server (HTTP and its kernel WebSocket) and a small header-echoing app. The console hands the
browser a single-use ticket; the port's host trades it for a cookie of its own; the platform's session cookie
is neither needed nor honoured there, nor passed to the app."""
import asyncio
import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import websockets
from django.conf import settings

from provisioning.http_ports import jupyter_token, port_path
from provisioning.models import PortShare
from provisioning.services.ports import instance_port_add, port_share_create, port_share_revoke
from tests.access.world import kernel_execute, loopback_instance, start_jupyter, stop
from tests.conftest import AsgiServer
from tests.factories.tenancy import session_key_for

pytestmark = [pytest.mark.timeout(180), pytest.mark.django_db(transaction=True)]


class _Echo(BaseHTTPRequestHandler):
    """An instance's app that answers with the headers it was sent and tries to set the platform's cookies."""

    def do_GET(self):  # noqa: N802 - http.server's name
        body = json.dumps({"path": self.path, "headers": dict(self.headers)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", f"{settings.SESSION_COOKIE_NAME}=stolen; Path=/")
        self.send_header("Set-Cookie", "app=1; Domain=localhost; Path=/")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(transactional_db, settings):
    srv = AsgiServer()
    mode = {"PROXY_MODE": "subdomain", "PROXY_BASE_DOMAIN": f"localhost:{srv.port}"}
    srv.env.update(mode)
    for name, value in mode.items():  # this process too (the API calls the test makes in it)
        setattr(settings, name, value)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def world(member_factory, tmp_path):
    owner = member_factory(role="member")
    instance = loopback_instance(owner.organization, ssh_port=30000, http_ports={})
    instance_port_add(org=instance.organization, instance_id=instance.pk, port=7860, name="echo", actor=owner.user)
    jupyter, jport = start_jupyter(tmp_path, base_url=port_path(instance.pk, 8888), token=jupyter_token(instance.pk))
    echo = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    instance.groups.update(http_ports={"8888": jport, "7860": echo.server_address[1]})
    yield owner, instance
    echo.shutdown()
    stop(jupyter)


def _host(server, instance, port):
    return f"{port}-{instance.pk.hex}.localhost:{server.port}"


def _console(server, membership=None):
    cookies = {settings.SESSION_COOKIE_NAME: session_key_for(membership)} if membership else {}
    return httpx.Client(base_url=server.url, cookies=cookies, timeout=30)


def _sign_in(server, membership, instance, port, next_path=""):
    """The console's hand-off: the open view's ticket, traded on the port's host for its grant cookie."""
    with _console(server, membership) as console:
        opened = console.get(f"/instances/{instance.pk}/ports/{port}/open/", params={"next": next_path})
    assert opened.status_code == 302, opened.text
    location = httpx.URL(opened.headers["location"])
    assert location.host == f"{port}-{instance.pk.hex}.localhost" and location.path == "/__cardmix_auth__"
    with httpx.Client(base_url=server.url, headers={"Host": _host(server, instance, port)}, timeout=30) as port_client:
        traded = port_client.get(location.path, params=dict(location.params))
    assert traded.status_code == 302, traded.text
    set_cookie = traded.headers["set-cookie"]
    assert set_cookie.startswith("cardmix_port=") and "HttpOnly" in set_cookie
    assert "domain" not in set_cookie.lower()  # this host only: no other instance's port ever gets it
    return traded.cookies["cardmix_port"], traded.headers["location"], location


def _get(server, instance, port, path, cookie=""):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        return client.get(path, headers={"Host": _host(server, instance, port), **({"Cookie": cookie} if cookie
                                                                                   else {})})


async def _run_in_kernel(server, instance, path, cookie: str, code: str) -> str:
    host = _host(server, instance, 8888)
    async with websockets.connect(f"ws://{host}{path}", host="127.0.0.1", port=server.port,
                                  additional_headers={"Cookie": cookie}, origin=f"http://{host}") as ws:
        return await kernel_execute(ws, code)


async def _ws_open(server, instance, path, cookie):
    host = _host(server, instance, 8888)
    async with websockets.connect(f"ws://{host}{path}", host="127.0.0.1", port=server.port,
                                  additional_headers={"Cookie": cookie} if cookie else {}, origin=f"http://{host}"):
        pass


def test_a_member_signs_in_on_the_ports_host_and_reaches_jupyter_and_its_kernel(server, world):
    owner, instance = world
    grant, next_location, ticket_url = _sign_in(server, owner, instance, 8888, next_path="api/status")
    assert next_location == "/api/status"
    status = _get(server, instance, 8888, "/api/status", f"cardmix_port={grant}")  # the app at its host's root
    assert status.status_code == 200 and "started" in status.json(), (status.text, server.log_tail())
    prefixed = _get(server, instance, 8888, f"{port_path(instance.pk, 8888)}api/status", f"cardmix_port={grant}")
    assert prefixed.status_code == 200  # the links Jupyter builds under its base_url work there too
    again = _get(server, instance, 8888, ticket_url.path + "?" + ticket_url.query.decode())
    assert again.status_code == 404  # a ticket is spent once
    with httpx.Client(base_url=server.url, headers={"Host": _host(server, instance, 8888)}, timeout=30) as client:
        kernel = client.post("/api/kernels", json={"name": "python3"}, headers={"Cookie": f"cardmix_port={grant}"})
    assert kernel.status_code == 201, kernel.text
    out = asyncio.run(_run_in_kernel(server, instance, f"/api/kernels/{kernel.json()['id']}/channels",
                                     f"cardmix_port={grant}", "print(6 * 7)"))
    assert out == "42\n"
    # No grant, or the platform's session cookie instead of one: refused before the upgrade.
    for cookie in ("", f"{settings.SESSION_COOKIE_NAME}={session_key_for(owner)}"):
        with pytest.raises(websockets.InvalidStatus):
            asyncio.run(_ws_open(server, instance, "/api/events/subscribe", cookie))


def test_the_app_never_sees_the_platforms_cookies_nor_sets_them_nor_reaches_other_hosts(server, world):
    owner, instance = world
    grant, _, _ = _sign_in(server, owner, instance, 7860)
    session = f"{settings.SESSION_COOKIE_NAME}={session_key_for(owner)}"
    echoed = _get(server, instance, 7860, "/x?y=1", f"{session}; cardmix_port={grant}; app=1")
    assert echoed.status_code == 200, echoed.text
    seen = echoed.json()
    assert seen["path"] == f"{port_path(instance.pk, 7860)}x?y=1"
    assert seen["headers"].get("Cookie") == "app=1"  # its own cookie only: no session, no grant
    set_cookies = echoed.headers.get_list("set-cookie")
    assert set_cookies and all(not c.startswith(f"{settings.SESSION_COOKIE_NAME}=") for c in set_cookies)
    assert all("domain" not in c.lower() for c in set_cookies)  # host-only: cannot be tossed to other instances
    # The grant is this port's: the instance's other port, and the console's pages, refuse it.
    assert _get(server, instance, 8888, "/api/status", f"cardmix_port={grant}").status_code == 404
    with _console(server) as console:
        page = console.get(f"/instances/{instance.pk}/", headers={"Cookie": f"cardmix_port={grant}"})
        assert page.status_code == 302 and "login" in page.headers["location"]  # not signed in by it
        # The platform's own origin serves no port at all in this mode.
        assert console.get(f"{port_path(instance.pk, 7860)}x", headers={"Cookie": session}).status_code == 404
    # Nothing but the proxy on a port's host: the console's paths there are the app's.
    for path in ("/instances/", "/api/v1/instances/", "/static/css/app.css", "/admin/"):
        forwarded = _get(server, instance, 7860, path, f"{session}; cardmix_port={grant}")
        assert forwarded.json()["path"] == f"{port_path(instance.pk, 7860)}{path[1:]}"


def test_another_organization_a_viewer_no_session_and_a_logged_out_session_get_404(server, world, member_factory):
    owner, instance = world
    for who in (member_factory(role="owner"), member_factory(role="viewer", organization=instance.organization)):
        with _console(server, who) as console:
            assert console.get(f"/instances/{instance.pk}/ports/8888/open/").status_code == 404, who
    with _console(server) as console:  # no session: the console's login
        assert console.get(f"/instances/{instance.pk}/ports/8888/open/").status_code == 302
    for cookie in ("", f"{settings.SESSION_COOKIE_NAME}={session_key_for(owner)}", "cardmix_port=forged"):
        refused = _get(server, instance, 8888, "/api/status", cookie)
        assert refused.status_code == 404 and "started" not in refused.text
    # Another organization's member with a grant of their own instance cannot use it on this one.
    stranger = member_factory(role="owner")
    theirs = loopback_instance(stranger.organization, ssh_port=30001, http_ports={"8888": 1})
    their_grant, _, _ = _sign_in(server, stranger, theirs, 8888)
    assert _get(server, instance, 8888, "/api/status", f"cardmix_port={their_grant}").status_code == 404
    # A grant lives only as long as the console session it came from.
    grant, _, _ = _sign_in(server, owner, instance, 8888)
    assert _get(server, instance, 8888, "/api/status", f"cardmix_port={grant}").status_code == 200
    from django.contrib.sessions.models import Session

    Session.objects.all().delete()
    assert _get(server, instance, 8888, "/api/status", f"cardmix_port={grant}").status_code == 404


def test_a_share_link_opens_the_ports_host_until_revoked(server, world, token_client_for):
    owner, instance = world
    made = token_client_for(owner).post(f"/api/v1/instances/{instance.pk}/ports/8888/shares/",
                                        {"expires_in_hours": 1}, format="json")
    assert made.status_code == 201
    url = httpx.URL(made.json()["url"])
    assert url.host == f"8888-{instance.pk.hex}.localhost" and url.path == "/"
    listed = token_client_for(owner).get(f"/api/v1/instances/{instance.pk}/ports/").json()["results"]
    assert listed[0]["url"] == f"http://{_host(server, instance, 8888)}/"
    first = _get(server, instance, 8888, f"/api/status?{url.query.decode()}")
    assert first.status_code == 302 and "cardmix_share" not in first.headers["location"]
    share_cookie = first.headers["set-cookie"]
    assert "Path=/" in share_cookie and "domain" not in share_cookie.lower()
    cookie = f"cardmix_share={first.cookies['cardmix_share']}"
    assert _get(server, instance, 8888, "/api/status", cookie).status_code == 200
    assert _get(server, instance, 7860, "/", cookie).status_code == 404  # one port only
    share = PortShare.objects.get(instance=instance)
    port_share_revoke(org=instance.organization, instance_id=instance.pk, share_id=share.pk, actor=owner.user)
    assert _get(server, instance, 8888, "/api/status", cookie).status_code == 404
    _, secret = port_share_create(org=instance.organization, instance_id=instance.pk, port=8888,
                                  expires_in=timedelta(hours=1), actor=owner.user)
    assert _get(server, instance, 8888, f"/api/status?cardmix_share={secret}").status_code == 302
