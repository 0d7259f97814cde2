"""The web terminal's WebSocket: a shell on the instance's real sshd as the platform key, resized on request,
refused to another organization and a viewer, and closed (code 4000) once the instance stops."""
import asyncio
import json
import os

import pytest
import websockets
from django.conf import settings
from django.db import connections

from inventory.models import Node
from provisioning.choices import InstanceState
from provisioning.models import Instance
from provisioning.platform_keys import platform_public_key
from tests.access.world import SSHD, loopback_instance, start_sshd, stop
from tests.conftest import AsgiServer
from tests.factories.tenancy import session_key_for

pytestmark = [pytest.mark.pg, pytest.mark.timeout(120), pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(not os.path.exists(SSHD) or os.geteuid() != 0,
                                 reason="needs openssh-server (bin/system-deps) and root")]


@pytest.fixture
def shell_instance(member_factory, tmp_path):
    member = member_factory(role="member")
    instance = loopback_instance(member.organization, kind="bare_metal")
    proc, port = start_sshd(tmp_path, platform_public_key(instance))
    Node.objects.filter(pk=instance.groups.get().node_id).update(ssh_port=port)
    yield member, instance
    stop(proc)


@pytest.fixture
def fast_server(transactional_db):
    server = AsgiServer({"TERMINAL_STATE_CHECK_SECONDS": "0.5"}).start()
    yield server
    server.stop()


def _stop_instance(pk):
    Instance.objects.filter(pk=pk).update(state=InstanceState.STOPPING)
    connections.close_all()  # this thread's connection, or dropping the test database waits for it


def _url(server, instance):
    return f"ws://127.0.0.1:{server.port}/ws/instances/{instance.pk}/terminal/"


def _cookie(membership):
    return {"Cookie": f"{settings.SESSION_COOKIE_NAME}={session_key_for(membership)}"}


async def _read_until(ws, needle: bytes, timeout=20) -> bytes:
    seen = b""
    while needle not in seen:
        seen += await asyncio.wait_for(ws.recv(), timeout=timeout)
    return seen


def test_a_member_gets_a_shell_that_resizes_and_closes_when_the_instance_stops(fast_server, shell_instance):
    member, instance = shell_instance
    cookie = _cookie(member)

    async def session():
        async with websockets.connect(_url(fast_server, instance), additional_headers=cookie,
                                      origin=fast_server.url) as ws:
            await ws.send(json.dumps({"resize": [132, 40]}))
            await ws.send(b"echo cols=$(tput cols) sum=$((6 * 7)) user=$(id -un)\n")
            out = await _read_until(ws, b"user=root")
            assert b"cols=132 sum=42 user=root" in out, out
            await asyncio.to_thread(_stop_instance, instance.pk)
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    await asyncio.wait_for(ws.recv(), timeout=10)
            return closed.value.rcvd.code

    assert asyncio.run(session()) == 4000, fast_server.log_tail()


async def _open(url, headers, origin):
    async with websockets.connect(url, additional_headers=headers, origin=origin):
        pass


def test_another_organization_and_a_viewer_are_refused(fast_server, shell_instance, member_factory):
    _, instance = shell_instance
    for who in (member_factory(role="owner"), member_factory(role="viewer", organization=instance.organization)):
        with pytest.raises(websockets.InvalidStatus):
            asyncio.run(_open(_url(fast_server, instance), _cookie(who), fast_server.url))


def test_a_page_on_another_site_cannot_open_the_terminal_with_a_visitors_cookie(fast_server, shell_instance):
    """Even with ALLOWED_HOSTS "*" (the development default the server runs with here)."""
    member, instance = shell_instance
    for origin in ("https://evil.example", f"http://127.0.0.1:{fast_server.port + 1}", None):
        with pytest.raises(websockets.InvalidStatus):
            asyncio.run(_open(_url(fast_server, instance), _cookie(member), origin))
