"""The asyncssh side of the SSH gateway.

Two ways in, one bridge:
- `ssh <ref>@gateway`: the login name is the instance (its name or short id); the connection's sessions are bridged.
- `ssh -J gateway root@<ref>`: the client opens a direct-tcpip channel to <ref>:22 and speaks SSH over it; the
  gateway answers that with a second SSH server of its own on the channel (a socket pair), where the same user
  logs in with a registered key again, and bridges that connection's sessions.
Bridging = the gateway logs into the instance's sshd as root with the instance's platform key and runs the same
request there (shell, command, pty with its size changes, subsystem such as sftp), passing bytes both ways.

Every instance session is audited when it opens and when it ends; every `recheck` seconds each open connection is
checked again (key removed, member removed or demoted, instance no longer running) and closed when it fails.
The Django calls run in one worker thread (sync_to_async), so the event loop never touches the ORM itself.
"""
import asyncio
import logging
import os
import socket
import time
from pathlib import Path

import asyncssh
from asgiref.sync import sync_to_async
from asyncssh.constants import EXTENDED_DATA_STDERR
from asyncssh.stream import SSHReader, SSHTCPStreamSession, SSHWriter
from django.db import close_old_connections

from .. import host_keys
from ..services import host_keys as host_key_services
from ..services import ssh_sessions
from . import access

log = logging.getLogger("cardmix.ssh_gateway")
SSHD_PORT = 22
PROHIBITED = asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED


def _db(fn, *args, **kwargs):
    """fn(*args, **kwargs) in the one thread that holds the gateway's database connection."""
    def call():
        close_old_connections()  # a long-lived process: drop a connection the database closed meanwhile
        return fn(*args, **kwargs)

    return sync_to_async(call, thread_sensitive=True)()


def host_key(path: str) -> asyncssh.SSHKey:
    """The gateway's host key, made (ed25519, mode 0600) on the first start: clients pin it in known_hosts."""
    p = Path(path)
    if not p.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(asyncssh.generate_private_key("ssh-ed25519").export_private_key())
        os.replace(tmp, p)  # whole or not at all: a crash never leaves half a key
        log.info("ssh gateway: made a host key at %s", p)
    return asyncssh.read_private_key(str(p))


async def _pump(reader, writer) -> None:
    """Copy bytes until EOF, then pass the EOF on."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, asyncssh.Error):
        pass  # the other side went away: the connection's end is handled by whoever owns it


class _BridgedSession(asyncssh.SSHServerProcess):
    """A session whose every request goes to the bridge, subsystems too: asyncssh's own session would refuse a
    subsystem, or serve sftp from the gateway's disk. session_started is SSHServerStreamSession's without its
    built-in sftp and scp servers (asyncssh is pinned; tests/provisioning/test_ssh_gateway_live.py runs sftp)."""

    def subsystem_requested(self, subsystem):
        return True

    def session_started(self):
        stdin = SSHReader(self, self._chan)
        stdout, stderr = SSHWriter(self, self._chan), SSHWriter(self, self._chan, EXTENDED_DATA_STDERR)
        self._conn.create_task(self._session_factory(stdin, stdout, stderr), stdin.logger)


class _Server(asyncssh.SSHServer):
    """One SSH connection to the gateway (from a client, or a `-J` hop inside one)."""

    def __init__(self, gateway: "Gateway", *, tunnel_of: "_Server | None" = None,
                 preset: tuple[access.Login, access.Target] | None = None):
        self.gateway, self.tunnel_of, self.preset = gateway, tunnel_of, preset
        self.conn = None
        self.username = ""
        self.logins: list[access.Login] = []
        self.login: access.Login | None = None
        self.target: access.Target | None = None
        self.refusal = ""
        self.peer = ("", 0)
        self.started: float | None = None
        self.end_reason = "closed"
        self.remotes: set = set()  # its client connections to the instance's sshd

    # --- connection and authentication ---
    def connection_made(self, conn):
        self.conn = conn
        self.peer = self.tunnel_of.peer if self.tunnel_of else tuple(conn.get_extra_info("peername")[:2])

    def begin_auth(self, username):
        self.username = username
        return True  # always ask for a key

    def password_auth_supported(self):
        return False

    def kbdint_auth_supported(self):
        return False

    def public_key_auth_supported(self):
        return True

    async def validate_public_key(self, username, key):
        # Everything is decided here, before the client hears "auth succeeded": OpenSSH opens its channels at
        # once, and they must find the login and target in place. asyncssh calls this before it checks the
        # signature, one request at a time, and the call for the key that succeeds is the last: what it leaves
        # here is that key's owner, never a key the client merely named.
        logins = await _db(access.logins_for_key, key.public_data)
        if self.preset is not None:  # a -J hop: only the person who opened the tunnel
            logins = [lg for lg in logins if lg.user_id == self.preset[0].user_id]
            if logins:
                self.login, self.target = logins[0], self.preset[1]
        elif logins:
            try:
                self.login, self.target = await _db(access.target_for, logins, username)
            except access.Refused as exc:
                # No instance by that login name: a jump login (its direct-tcpip channels name the instance), or
                # a refused one (its sessions print why).
                self.login, self.target, self.refusal = logins[0], None, str(exc)
        if logins:
            self.logins = logins
        return bool(logins)

    def auth_completed(self):
        self.started = time.monotonic()
        self.gateway.live.add(self)
        if self.target is not None:
            log.info("ssh gateway: %s from %s:%s to %s", self.login.email, *self.peer, self.target.name)
            self.gateway.spawn(_db(
                ssh_sessions.ssh_session_opened, user_id=self.login.user_id, instance_id=self.target.instance_id,
                org_id=self.target.org_id, ip=self.peer[0], port=self.peer[1], fingerprint=self.login.fingerprint,
                form="jump" if self.preset is not None else "user"))

    def connection_lost(self, exc):
        self.gateway.live.discard(self)
        for remote in list(self.remotes):
            remote.close()
        if self.target is not None and self.started is not None:
            self.gateway.spawn(_db(
                ssh_sessions.ssh_session_closed, user_id=self.login.user_id, instance_id=self.target.instance_id,
                org_id=self.target.org_id, ip=self.peer[0], port=self.peer[1], fingerprint=self.login.fingerprint,
                seconds=int(time.monotonic() - self.started), reason=self.end_reason))

    def end(self, reason: str) -> None:
        """Close it now (a revoked key or membership, a stopped instance, the gateway stopping)."""
        log.info("ssh gateway: closing %s's connection from %s:%s: %s",
                 self.login.email if self.login else "?", *self.peer, reason)
        self.end_reason = reason
        if self.conn is not None:
            self.conn.close()

    def session_requested(self):
        return _BridgedSession(self.gateway.bridge, None, 3, False)

    # --- `ssh -J`: a channel to <instance>:22 ---
    def connection_requested(self, dest_host, dest_port, orig_host, orig_port):
        if self.preset is not None or self.login is None:
            raise asyncssh.ChannelOpenError(PROHIBITED, "Forwarding is not offered here.")
        if dest_port != SSHD_PORT:
            raise asyncssh.ChannelOpenError(PROHIBITED, "Only an instance's sshd (port 22) is reachable here.")
        return self._tunnel(dest_host)

    async def _tunnel(self, ref: str):
        try:
            preset = await _db(access.target_for, self.logins, ref)
        except access.Refused as exc:
            log.info("ssh gateway: refused %s from %s:%s a tunnel to %s: %s", self.login.email, *self.peer, ref[:64],
                     exc)
            raise asyncssh.ChannelOpenError(PROHIBITED, str(exc)) from None
        except Exception:
            log.exception("ssh gateway: resolving %s failed", ref[:64])
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "The gateway failed; try again.") from None
        return SSHTCPStreamSession(lambda reader, writer: self.gateway.hop(self, preset, reader, writer))


class Gateway:
    """The listener, its open connections, and the recheck that closes the ones no longer allowed."""

    def __init__(self, *, key: asyncssh.SSHKey, recheck_seconds: float):
        self.key = key
        self.recheck_seconds = recheck_seconds
        self.live: set[_Server] = set()
        self._tasks: set[asyncio.Task] = set()
        self._acceptor = None

    def spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _options(self) -> dict:
        return {"server_host_keys": [self.key], "encoding": None,
                "agent_forwarding": False, "x11_forwarding": False, "login_timeout": 60, "keepalive_interval": 30}

    async def start(self, host: str, port: int):
        self._acceptor = await asyncssh.listen(host, port, server_factory=lambda: _Server(self), **self._options())
        return self._acceptor

    async def hop(self, outer: _Server, preset, reader, writer) -> None:
        """Answer a -J channel with an SSH server of our own on a socket pair (the user logs in to it)."""
        ours, theirs = socket.socketpair()
        pipe_reader, pipe_writer = await asyncio.open_connection(sock=theirs)
        pumps = [asyncio.ensure_future(_pump(reader, pipe_writer)), asyncio.ensure_future(_pump(pipe_reader, writer))]
        try:
            conn = await asyncssh.run_server(ours, server_factory=lambda: _Server(self, tunnel_of=outer, preset=preset),
                                             **self._options())
            await conn.wait_closed()
        except (OSError, asyncssh.Error) as exc:
            log.info("ssh gateway: a -J hop from %s:%s ended: %s", *outer.peer, exc)
        finally:
            for pump in pumps:
                pump.cancel()
            pipe_writer.close()
            writer.close()

    async def bridge(self, process: asyncssh.SSHServerProcess) -> None:
        """Run the session's request on the instance's sshd, logged in with the instance's platform key."""
        server = process.channel.get_connection().get_owner()
        target = server.target
        if target is None:
            process.stderr.write(f"cardmix: {server.refusal or 'Name the instance.'} "
                                 "Use: ssh <instance short id>@<gateway>, or ssh -J <gateway> root@<instance>\r\n"
                                 .encode())
            process.exit(1)
            return
        try:
            async with await host_keys.connect_checked(
                    target.host, target.port, pinned=target.host_key,
                    pin=lambda line: _db(host_key_services.host_key_pin, group_id=target.group_id, line=line),
                    refuse=lambda expected, offered: _db(
                        host_key_services.host_key_refused, group_id=target.group_id, user_id=server.login.user_id,
                        via="ssh-gateway", expected=expected, offered=offered, ip=server.peer[0]),
                    username=target.user, config=None, agent_path=None,
                    client_keys=[asyncssh.import_private_key(target.private_key)], preferred_auth="publickey",
                    connect_timeout=15) as conn:
                server.remotes.add(conn)
                remote = await conn.create_process(process.command, subsystem=process.subsystem,
                                                   term_type=process.term_type, term_size=process.term_size,
                                                   encoding=None)
                await process.redirect(stdin=remote.stdin, stdout=remote.stdout, stderr=remote.stderr)
                finished = await remote.wait(check=False)
                await process.stdout.drain()
                status = finished.exit_status
                process.exit(status if status is not None and status >= 0 else 255)
        except host_keys.HostKeyMismatch as exc:
            log.warning("ssh gateway: %s's sshd at %s:%s: %s", target.name, target.host, target.port, exc)
            process.stderr.write(f"cardmix: {exc}\r\n".encode())
            process.exit(255)
        except (OSError, asyncssh.Error) as exc:
            log.warning("ssh gateway: %s's sshd at %s:%s: %s", target.name, target.host, target.port, exc)
            process.stderr.write(f"cardmix: the instance's sshd did not answer: {exc}\r\n".encode())
            process.exit(255)

    async def recheck_once(self) -> None:
        for server in list(self.live):
            if server.login is None:
                continue
            reason = await _db(access.session_refusal, server.login, server.target)
            if reason:
                server.end(reason)

    async def recheck_forever(self) -> None:
        while True:
            await asyncio.sleep(self.recheck_seconds)
            try:
                await self.recheck_once()
            except Exception:  # a database hiccup must not stop the rechecks for good
                log.exception("ssh gateway: recheck failed; trying again in %ss", self.recheck_seconds)

    async def stop(self) -> None:
        if self._acceptor is not None:
            self._acceptor.close()
        for server in list(self.live):
            server.end("gateway stopped")
        await asyncio.sleep(0.2)  # connection_lost runs, and queues the closing audit rows
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)
