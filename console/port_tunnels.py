"""A container's port that was not published at its start (a user added it later) is reached through the
instance's own sshd instead: Docker cannot add a published port to a running container (port bindings are fixed
when it is created; `docker update` does not change them), but the platform already logs into the container's
sshd with the instance's platform key. The proxy asks here for a local address: an SSH local forward
(127.0.0.1:<ephemeral> on the platform host → 127.0.0.1:<port> inside the container), made on first use, kept
while used and closed after TUNNEL_IDLE_SECONDS without use. The sshd's host key is checked as the web terminal
and the gateway check it (provisioning/host_keys.py). Per ASGI process.
"""
import asyncio
import time

import asyncssh
from channels.db import database_sync_to_async

from provisioning import host_keys
from provisioning.endpoints import SSH_USER
from provisioning.services.host_keys import host_key_pin, host_key_refused

TUNNEL_IDLE_SECONDS = 600.0


class _Tunnel:
    def __init__(self, conn, listener):
        self.conn, self.listener = conn, listener
        self.used = time.monotonic()

    @property
    def alive(self) -> bool:
        return self.conn is not None and not self.conn.is_closed()


_tunnels: dict[tuple, _Tunnel] = {}
_locks: dict[tuple, asyncio.Lock] = {}


async def local_address(target) -> tuple[str, int]:
    """(host, port) on this machine that reaches `target.port` inside the instance (target.tunnel set)."""
    key = (id(asyncio.get_running_loop()), target.instance_id, target.port)  # a connection is its loop's
    lock = _locks.setdefault(key, asyncio.Lock())
    async with lock:
        tunnel = _tunnels.get(key)
        if tunnel is None or not tunnel.alive:
            tunnel = _tunnels[key] = await _open(target)
            asyncio.get_running_loop().create_task(_reap(key, tunnel))
        tunnel.used = time.monotonic()
        return "127.0.0.1", tunnel.listener.get_port()


async def _open(target) -> _Tunnel:
    via = target.tunnel
    conn = await host_keys.connect_checked(
        via.host, via.port, pinned=via.host_key,
        pin=lambda line: database_sync_to_async(host_key_pin)(group_id=via.group_id, line=line),
        refuse=lambda expected, offered: database_sync_to_async(host_key_refused)(
            group_id=via.group_id, user_id=None, via="port-proxy", expected=expected, offered=offered),
        username=SSH_USER, client_keys=[asyncssh.import_private_key(via.private_key)], agent_path=None,
        config=None, connect_timeout=15, keepalive_interval=30)
    listener = await conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", target.port)
    return _Tunnel(conn, listener)


async def _reap(key, tunnel: _Tunnel) -> None:
    """Close the tunnel once unused for TUNNEL_IDLE_SECONDS (or once its connection dropped)."""
    while tunnel.alive and time.monotonic() - tunnel.used < TUNNEL_IDLE_SECONDS:
        await asyncio.sleep(min(30.0, TUNNEL_IDLE_SECONDS))
    if _tunnels.get(key) is tunnel:
        del _tunnels[key]
        _locks.pop(key, None)
    tunnel.listener.close()
    if tunnel.conn is not None:
        tunnel.conn.close()
