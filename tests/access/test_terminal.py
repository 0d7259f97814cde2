"""The web terminal's WebSocket: a shell on the instance's real sshd as the platform key, resized on request,
refused to another organization and a viewer, closed (code 4000) once the instance stops; the same shell again
after a dropped connection; refused (code 4004, audited) when the sshd's host key is not the pinned one."""
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

pytestmark = [pytest.mark.timeout(120), pytest.mark.django_db(transaction=True),
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
    """The shell's output up to `needle` (text frames are the server's notices, not output)."""
    seen = b""
    while needle not in seen:
        frame = await asyncio.wait_for(ws.recv(), timeout=timeout)
        if isinstance(frame, bytes):
            seen += frame
    return seen


async def _notice(ws) -> dict:
    """The server's first text frame: {"session": id, "reattached": bool}."""
    while True:
        frame = await asyncio.wait_for(ws.recv(), timeout=20)
        if isinstance(frame, str):
            return json.loads(frame)


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


def test_a_reconnect_with_the_shells_id_gets_the_same_shell_and_what_it_printed_meanwhile(
        fast_server, shell_instance, member_factory):
    member, instance = shell_instance
    url, cookie = _url(fast_server, instance), _cookie(member)
    other = _cookie(member_factory(role="member", organization=instance.organization))

    async def session():
        ws = await websockets.connect(url, additional_headers=cookie, origin=fast_server.url)
        first = await _notice(ws)
        assert first["reattached"] is False and first["session"]
        await ws.send(b"export MARK=kept$((6 * 7)); echo marked-$((1 + 1))\n")
        await _read_until(ws, b"marked-2")
        await ws.send(b"sleep 1; echo printed-while-away-$((40 + 2))\n")
        await ws.close()  # the network drops; the shell runs on
        await asyncio.sleep(2)
        again = await websockets.connect(f"{url}?session={first['session']}", additional_headers=cookie,
                                         origin=fast_server.url)
        notice = await _notice(again)
        assert notice == {"session": first["session"], "reattached": True}
        await _read_until(again, b"printed-while-away-42")  # replayed from the backlog
        await again.send(b"echo mark=$MARK\n")
        await _read_until(again, b"mark=kept42")  # the variable set before the drop: the same shell
        # Another member of the same organization cannot take that shell by its id: they get one of their own.
        async with websockets.connect(f"{url}?session={first['session']}", additional_headers=other,
                                      origin=fast_server.url) as theirs:
            assert (await _notice(theirs))["reattached"] is False
        # Reconnecting takes the shell over from a socket the server still holds open (a half-open blip).
        third = await websockets.connect(f"{url}?session={first['session']}", additional_headers=cookie,
                                         origin=fast_server.url)
        assert (await _notice(third))["reattached"] is True
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(again.recv(), timeout=10)
        await third.close()
        return closed.value.rcvd.code

    assert asyncio.run(session()) == 4003, fast_server.log_tail()


def test_the_sshds_host_key_is_pinned_and_a_different_one_refused_and_audited(fast_server, shell_instance, tmp_path):
    """The fixture's sshd re-reads its host key file for each connection (OpenSSH's re-exec): swapping the file is
    the instance presenting another key, as a host in the middle would."""
    import subprocess

    from provisioning.host_keys import fingerprint, key_line
    from provisioning.models import NodeGroup
    from tenancy.models import AuditEvent

    member, instance = shell_instance
    url, cookie = _url(fast_server, instance), _cookie(member)

    async def shell(expect: bytes):
        async with websockets.connect(url, additional_headers=cookie, origin=fast_server.url) as ws:
            if expect:
                await ws.send(b"echo ok-$((1 + 1))\n")
                await _read_until(ws, expect)
                return None
            with pytest.raises(websockets.ConnectionClosed) as closed:
                seen = b""
                while True:
                    frame = await asyncio.wait_for(ws.recv(), timeout=20)
                    seen += frame if isinstance(frame, bytes) else b""
            return closed.value.rcvd.code, seen

    asyncio.run(shell(b"ok-2"))  # first use: the key is pinned
    original = key_line((tmp_path / "ssh_host_ed25519.pub").read_text())
    assert NodeGroup.objects.get(instance=instance).ssh_host_key == original
    asyncio.run(shell(b"ok-2"))  # the same key again: accepted
    for name in ("ssh_host_ed25519", "ssh_host_ed25519.pub"):
        (tmp_path / name).unlink()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "ssh_host_ed25519")],
                   check=True)
    swapped = key_line((tmp_path / "ssh_host_ed25519.pub").read_text())
    code, seen = asyncio.run(shell(b""))
    assert code == 4004 and b"host key is not the one" in seen and fingerprint(swapped).encode() in seen
    assert NodeGroup.objects.get(instance=instance).ssh_host_key == original  # the pin stays
    row = AuditEvent.objects.get(action="instance.host_key_mismatch", target_id=str(instance.pk))
    assert row.organization_id == instance.organization_id and row.actor_id == member.user_id
    assert row.details["expected"] == fingerprint(original) and row.details["offered"] == fingerprint(swapped)
    assert row.details["via"] == "web-terminal"
