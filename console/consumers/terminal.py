"""The web terminal: a WebSocket bridged to a login shell on the instance, over SSH as the platform's key.

asyncssh connects to the instance's sshd (the head group's SSH endpoint, provisioning/endpoints.py) with the
instance's own platform key (platform_keys.py), never a user's. Frames: binary from the browser is keyboard
input, text is a JSON control message ({"resize": [cols, rows]}); binary to the browser is the terminal's
output. The shell closes when the instance stops (its state is checked every TERMINAL_STATE_CHECK_SECONDS)
with close code 4000, which the page does not reconnect after; a dropped network reconnects.
"""
import asyncio
import contextlib
import json

import asyncssh
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from core.errors import NotFoundError
from provisioning.choices import InstanceState
from provisioning.endpoints import SSH_USER
from provisioning.platform_keys import platform_private_key
from provisioning.selectors import instance_ssh_endpoint, instance_state

from .. import proxy_access as access

CLOSED_STOPPED = 4000  # the instance left `running`: the page shows why and does not reconnect
CLOSED_UNREACHABLE = 4001  # its sshd did not answer


def _shell_target(*, user, session, instance_id):
    """(host, port, private key) of the member's running instance's shell."""
    instance = access.running_instance(user=user, session=session, instance_id=instance_id)
    host, port = instance_ssh_endpoint(instance=instance)
    return host, port, platform_private_key(instance)


class TerminalConsumer(AsyncWebsocketConsumer):
    conn = None
    process = None
    tasks = ()

    async def connect(self):
        self.instance_id = self.scope["url_route"]["kwargs"]["instance_id"]
        try:
            host, port, key = await database_sync_to_async(_shell_target)(
                user=self.scope.get("user"), session=self.scope.get("session") or {}, instance_id=self.instance_id)
        except NotFoundError:
            await self.close()
            return
        await self.accept()
        try:
            self.conn = await asyncssh.connect(
                host, port=port, username=SSH_USER, client_keys=[asyncssh.import_private_key(key)],
                known_hosts=None, connect_timeout=settings.TERMINAL_CONNECT_TIMEOUT_SECONDS, agent_path=None)
            self.process = await self.conn.create_process(term_type="xterm-256color", term_size=(80, 24),
                                                          encoding=None)
        except (TimeoutError, OSError, asyncssh.Error) as exc:
            await self.send(bytes_data=f"\r\nThe instance's shell does not answer: {exc}\r\n".encode())
            await self.close(code=CLOSED_UNREACHABLE)
            return
        self.tasks = (asyncio.create_task(self._output()), asyncio.create_task(self._watch_state()))

    async def _output(self):
        try:
            while True:
                data = await self.process.stdout.read(65536)
                if not data:
                    break
                await self.send(bytes_data=data)
        except (asyncssh.Error, OSError):
            pass
        await self.close()

    async def _watch_state(self):
        while True:
            await asyncio.sleep(settings.TERMINAL_STATE_CHECK_SECONDS)
            state = await database_sync_to_async(instance_state)(instance_id=self.instance_id)
            if state != InstanceState.RUNNING:
                await self.send(bytes_data=f"\r\n[the instance is {state or 'gone'}: terminal closed]\r\n".encode())
                await self.close(code=CLOSED_STOPPED)
                self._hang_up()
                return

    async def receive(self, text_data=None, bytes_data=None):
        if self.process is None:
            return
        if bytes_data is not None:
            self.process.stdin.write(bytes_data)
            return
        try:
            cols, rows = json.loads(text_data)["resize"]
            self.process.change_terminal_size(max(1, min(int(cols), 1000)), max(1, min(int(rows), 500)))
        except (ValueError, KeyError, TypeError):
            pass  # not a control message this terminal knows: ignored, the shell goes on

    def _hang_up(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    async def disconnect(self, code):
        self._hang_up()
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
