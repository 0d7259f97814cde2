"""Through /proxy/<instance>/<port>/ a real jupyter-server behind an instance answers its members (HTTP and
the kernel's WebSocket, with the token the proxy adds), 404 to everyone else, and a share link works until it
is revoked or expires."""
import asyncio
from datetime import timedelta

import httpx
import pytest
import websockets
from django.conf import settings
from django.utils import timezone

from provisioning.http_ports import jupyter_token, port_path
from provisioning.models import PortShare
from provisioning.services.ports import port_share_create, port_share_revoke
from tests.access.world import kernel_execute, loopback_instance, start_jupyter, stop
from tests.factories.tenancy import session_key_for

pytestmark = [pytest.mark.timeout(180), pytest.mark.django_db(transaction=True)]


@pytest.fixture
def jupyter_instance(member_factory, tmp_path):
    owner = member_factory(role="member")
    instance = loopback_instance(owner.organization, ssh_port=30000, http_ports={})
    proc, port = start_jupyter(tmp_path, base_url=port_path(instance.pk, 8888), token=jupyter_token(instance.pk))
    # The container published its JupyterLab (8888 inside) on this node port.
    instance.groups.update(http_ports={"8888": port})
    yield owner, instance
    stop(proc)


def _client(server, membership=None, **kw):
    cookies = {settings.SESSION_COOKIE_NAME: session_key_for(membership)} if membership else {}
    return httpx.Client(base_url=server.url, cookies=cookies, timeout=30, **kw)


async def _run_in_kernel(server, path, cookie: str, code: str) -> str:
    """Execute `code` on the kernel through the proxy's WebSocket; its stdout."""
    url = f"ws://127.0.0.1:{server.port}{path}"
    async with websockets.connect(url, additional_headers={"Cookie": cookie}, origin=server.url) as ws:
        return await kernel_execute(ws, code)


def test_a_member_reaches_jupyter_over_http_and_its_kernel_websocket(asgi_server, jupyter_instance):
    owner, instance = jupyter_instance
    base = port_path(instance.pk, 8888)
    with _client(asgi_server, owner) as client:
        status = client.get(f"{base}api/status")  # Jupyter answers only with its token: the proxy added it
        assert status.status_code == 200, (status.text, asgi_server.log_tail())
        assert "started" in status.json()
        kernel = client.post(f"{base}api/kernels", json={"name": "python3"})
        assert kernel.status_code == 201, kernel.text
        kernel_id = kernel.json()["id"]
        cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME]}"
    out = asyncio.run(_run_in_kernel(asgi_server, f"{base}api/kernels/{kernel_id}/channels", cookie,
                                     "print(6 * 7)"))
    assert out == "42\n"


def test_another_organization_a_viewer_and_no_session_get_404(asgi_server, jupyter_instance, member_factory):
    _, instance = jupyter_instance
    url = f"{port_path(instance.pk, 8888)}api/status"
    for who in (member_factory(role="owner"), member_factory(role="viewer", organization=instance.organization),
                None):
        with _client(asgi_server, who) as client:
            refused = client.get(url)
            assert refused.status_code == 404, (who, refused.text)
            assert "started" not in refused.text
    ws_url = f"ws://127.0.0.1:{asgi_server.port}{port_path(instance.pk, 8888)}api/events/subscribe"
    other = f"{settings.SESSION_COOKIE_NAME}={session_key_for(member_factory(role='owner'))}"
    with pytest.raises(websockets.InvalidStatus):
        asyncio.run(_ws_open(ws_url, other, asgi_server.url))


async def _ws_open(url, cookie, origin):
    async with websockets.connect(url, additional_headers={"Cookie": cookie}, origin=origin):
        pass


def test_a_share_link_opens_the_port_until_revoked_or_expired(asgi_server, jupyter_instance):
    owner, instance = jupyter_instance
    base = port_path(instance.pk, 8888)
    share, secret = port_share_create(org=instance.organization, instance_id=instance.pk, port=8888,
                                      expires_in=timedelta(hours=1), actor=owner.user)
    with _client(asgi_server) as visitor:  # no session at all
        first = visitor.get(f"{base}api/status", params={"cardmix_share": secret})
        assert first.status_code == 302 and "cardmix_share" not in first.headers["location"]
        assert visitor.get(first.headers["location"]).status_code == 200  # the cookie the redirect set
        assert visitor.get(f"{port_path(instance.pk, 6006)}").status_code == 404  # one port only
        port_share_revoke(org=instance.organization, instance_id=instance.pk, share_id=share.pk, actor=owner.user)
        assert visitor.get(f"{base}api/status").status_code == 404
    share, secret = port_share_create(org=instance.organization, instance_id=instance.pk, port=8888,
                                      expires_in=timedelta(hours=1), actor=owner.user)
    with _client(asgi_server) as visitor:
        assert visitor.get(f"{base}api/status", params={"cardmix_share": secret},
                           follow_redirects=True).status_code == 200
        PortShare.objects.filter(pk=share.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        assert visitor.get(f"{base}api/status").status_code == 404
