"""The web terminal: a WebSocket bridged to a login shell on the instance, over SSH as the platform's key.

asyncssh connects to the instance's sshd (the head group's SSH endpoint, provisioning/endpoints.py) with the
instance's own platform key (platform_keys.py), never a user's, and checks the sshd's host key against the one
pinned for the group (provisioning/host_keys.py: a different one is refused, code 4004, and audited). Frames:
binary from the browser is keyboard input, text is a JSON control message ({"resize": [cols, rows]}); binary to
the browser is the terminal's output, text a JSON notice ({"session": id, "reattached": bool}). The shell
outlives a dropped WebSocket for TERMINAL_GRACE_SECONDS (console/terminal_sessions.py): the page reconnects with
`?session=<id>` and gets the same shell back. The shell closes when the instance stops (its state is checked
every TERMINAL_STATE_CHECK_SECONDS) with close code 4000, which the page does not reconnect after.
"""
import asyncio
import contextlib
import json
from urllib.parse import parse_qs

import asyncssh
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from core.errors import NotFoundError
from provisioning import host_keys
from provisioning.choices import InstanceState
from provisioning.endpoints import SSH_USER
from provisioning.platform_keys import platform_private_key
from provisioning.selectors import instance_ssh_endpoint, instance_state
from provisioning.services.host_keys import host_key_pin, host_key_refused

from .. import proxy_access as access
from .. import terminal_sessions

CLOSED_STOPPED = 4000  # the instance left `running`: the page shows why and does not reconnect
CLOSED_UNREACHABLE = 4001  # its sshd did not answer
CLOSED_TAKEN_OVER = 4003  # another WebSocket (a reconnect of the same page, usually) took this shell
CLOSED_HOST_KEY = 4004  # the sshd's host key is not the pinned one


def _shell_target(*, user, session, instance_id):
    """The member's running instance's sshd (endpoint with its pinned host key) and the platform key."""
    instance = access.running_instance(user=user, session=session, instance_id=instance_id)
    return instance_ssh_endpoint(instance=instance), platform_private_key(instance)


class TerminalConsumer(AsyncWebsocketConsumer):
    shell = None
    watcher = None

    async def connect(self):
        self.instance_id = self.scope["url_route"]["kwargs"]["instance_id"]
        user = self.scope.get("user")
        try:
            endpoint, key = await database_sync_to_async(_shell_target)(
                user=user, session=self.scope.get("session") or {}, instance_id=self.instance_id)
        except NotFoundError:
            await self.close()
            return
        await self.accept()
        self.user_id = str(user.pk)
        asked = parse_qs(self.scope.get("query_string", b"").decode("latin-1")).get("session", [""])[0]
        shell = terminal_sessions.session_find(asked, user_id=self.user_id, instance_id=self.instance_id)
        reattached = shell is not None
        if shell is None:
            shell = await self._open_shell(endpoint, key)
            if shell is None:
                return
        self.shell = shell
        await self.send(text_data=json.dumps({"session": shell.id, "reattached": reattached}))
        await shell.attach(self)
        self.watcher = asyncio.create_task(self._watch_state())

    async def _open_shell(self, endpoint, key):
        try:
            conn = await host_keys.connect_checked(
                endpoint.host, endpoint.port, pinned=endpoint.host_key,
                pin=lambda line: database_sync_to_async(host_key_pin)(group_id=endpoint.group_id, line=line),
                refuse=lambda expected, offered: database_sync_to_async(host_key_refused)(
                    group_id=endpoint.group_id, user_id=self.user_id, via="web-terminal", expected=expected,
                    offered=offered, ip=(self.scope.get("client") or [None])[0]),
                username=SSH_USER, client_keys=[asyncssh.import_private_key(key)],
                connect_timeout=settings.TERMINAL_CONNECT_TIMEOUT_SECONDS, agent_path=None, config=None)
        except host_keys.HostKeyMismatch as exc:
            await self.send(bytes_data=f"\r\n{exc}\r\n".encode())
            await self.close(code=CLOSED_HOST_KEY)
            return None
        except (TimeoutError, OSError, asyncssh.Error) as exc:
            await self.send(bytes_data=f"\r\nThe instance's shell does not answer: {exc}\r\n".encode())
            await self.close(code=CLOSED_UNREACHABLE)
            return None
        try:
            process = await conn.create_process(term_type="xterm-256color", term_size=(80, 24), encoding=None)
        except (OSError, asyncssh.Error) as exc:
            conn.close()
            await self.send(bytes_data=f"\r\nThe instance's shell does not answer: {exc}\r\n".encode())
            await self.close(code=CLOSED_UNREACHABLE)
            return None
        return terminal_sessions.session_open(user_id=self.user_id, instance_id=self.instance_id, conn=conn,
                                              process=process)

    async def _watch_state(self):
        while True:
            await asyncio.sleep(settings.TERMINAL_STATE_CHECK_SECONDS)
            state = await database_sync_to_async(instance_state)(instance_id=self.instance_id)
            if state != InstanceState.RUNNING:
                await self.send(bytes_data=f"\r\n[the instance is {state or 'gone'}: terminal closed]\r\n".encode())
                await self.close(code=CLOSED_STOPPED)
                for shell in terminal_sessions.sessions_of_instance(self.instance_id):
                    shell.close()
                return

    async def shell_ended(self):
        """The shell exited (or its connection dropped): close; the page reconnects to a new one."""
        with contextlib.suppress(Exception):
            await self.close()

    async def taken_over(self):
        self.shell = None
        with contextlib.suppress(Exception):
            await self.close(code=CLOSED_TAKEN_OVER)

    async def receive(self, text_data=None, bytes_data=None):
        if self.shell is None:
            return
        if bytes_data is not None:
            self.shell.write(bytes_data)
            return
        try:
            cols, rows = json.loads(text_data)["resize"]
            self.shell.resize(max(1, min(int(cols), 1000)), max(1, min(int(rows), 500)))
        except (ValueError, KeyError, TypeError):
            pass  # not a control message this terminal knows: ignored, the shell goes on

    async def disconnect(self, code):
        if self.shell is not None:
            self.shell.detach(self)
            self.shell = None
        if self.watcher is not None and self.watcher is not asyncio.current_task():
            self.watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.watcher
