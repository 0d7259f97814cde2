"""A port added to a running container (so not published on its node) is reached at once through the container's
own sshd (console/port_tunnels.py): a real sshd as the container's, a real HTTP app behind it on a port nothing
published, a real uvicorn in front; HTTP and a WebSocket through the proxy."""
import asyncio
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import websockets
from django.conf import settings

from provisioning.http_ports import port_path
from provisioning.models import NodeGroup
from provisioning.platform_keys import platform_public_key
from provisioning.services.ports import instance_port_add
from tests.access.world import SSHD, loopback_instance, start_sshd, stop
from tests.factories.tenancy import session_key_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(not os.path.exists(SSHD) or os.geteuid() != 0,
                                 reason="needs openssh-server (bin/system-deps) and root")]


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        body = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


async def _echo(ws):
    async for message in ws:
        await ws.send(f"echo:{message}")


def test_a_port_added_after_the_start_is_reached_through_the_containers_sshd(asgi_server, member_factory,
                                                                              tmp_path):
    member = member_factory(role="member")
    instance = loopback_instance(member.organization, ssh_port=1, http_ports={})  # nothing published
    sshd, ssh_port = start_sshd(tmp_path, platform_public_key(instance))
    instance.groups.update(ssh_port=ssh_port)
    app = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)  # "inside the container": loopback of its sshd
    threading.Thread(target=app.serve_forever, daemon=True).start()
    port = app.server_address[1]
    instance_port_add(org=instance.organization, instance_id=instance.pk, port=port, name="late", actor=member.user)
    cookie = {settings.SESSION_COOKIE_NAME: session_key_for(member)}

    async def ws_through(ws_port: int) -> str:
        url = f"ws://127.0.0.1:{asgi_server.port}{port_path(instance.pk, ws_port)}socket"
        async with websockets.connect(url, origin=asgi_server.url, additional_headers={
                "Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie[settings.SESSION_COOKIE_NAME]}"}) as ws:
            await ws.send("hi")
            return await asyncio.wait_for(ws.recv(), timeout=20)

    async def ws_app():
        return await websockets.serve(_echo, "127.0.0.1", 0)

    try:
        with httpx.Client(base_url=asgi_server.url, cookies=cookie, timeout=30) as client:
            got = client.get(f"{port_path(instance.pk, port)}x?y=1")
            assert got.status_code == 200, (got.text, asgi_server.log_tail())
            assert got.json() == {"path": f"{port_path(instance.pk, port)}x?y=1"}
            assert client.get(f"{port_path(instance.pk, port)}again").status_code == 200  # the tunnel kept
        # The sshd's host key was pinned by that first connection, as the terminal's and the gateway's are.
        assert NodeGroup.objects.get(instance=instance).ssh_host_key.startswith("ssh-ed25519 ")
        # A WebSocket app on another late port, through the same way.
        loop = asyncio.new_event_loop()
        server = loop.run_until_complete(ws_app())
        threading.Thread(target=loop.run_forever, daemon=True).start()
        ws_port = server.sockets[0].getsockname()[1]
        instance_port_add(org=instance.organization, instance_id=instance.pk, port=ws_port, name="ws",
                          actor=member.user)
        assert asyncio.run(ws_through(ws_port)) == "echo:hi"
        loop.call_soon_threadsafe(server.close)
        # Another organization's member: 404, the tunnel or not.
        stranger = {settings.SESSION_COOKIE_NAME: session_key_for(member_factory(role="owner"))}
        with httpx.Client(base_url=asgi_server.url, cookies=stranger, timeout=30) as client:
            assert client.get(f"{port_path(instance.pk, port)}x").status_code == 404
    finally:
        app.shutdown()
        stop(sshd)
