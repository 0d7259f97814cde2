"""The web terminal's shells, kept past a dropped WebSocket so a reconnect reattaches to the same one.

A shell (an SSH process on the instance, as its platform key) belongs to a ShellSession with a random id, the
user and the instance. The page gets the id when its WebSocket opens and sends it back when it reconnects; if
the same user reconnects to the same instance within TERMINAL_GRACE_SECONDS, the WebSocket takes the shell over
and first receives what the shell printed meanwhile (its last TERMINAL_BACKLOG_BYTES). After the grace period,
an instance stop, or the shell's exit, the SSH connection is closed. The registry is this process's: behind
several ASGI worker processes a reconnect that lands on another one gets a new shell (the page says so).
"""
import asyncio
import contextlib
import secrets

from django.conf import settings


class ShellSession:
    def __init__(self, *, user_id: str, instance_id: str, conn, process):
        self.id = secrets.token_urlsafe(24)
        self.user_id, self.instance_id = user_id, instance_id
        self.conn, self.process = conn, process
        self.consumer = None  # the attached WebSocket consumer, or None while detached
        self.backlog = bytearray()
        self._expiry: asyncio.TimerHandle | None = None
        self._pump = asyncio.create_task(self._output())

    async def _output(self):
        """Shell output to the attached WebSocket, or into the backlog while none is attached."""
        try:
            while True:
                data = await self.process.stdout.read(65536)
                if not data:
                    break
                consumer = self.consumer
                if consumer is not None:
                    try:
                        await consumer.send(bytes_data=data)
                        continue
                    except Exception:  # noqa: BLE001 - the socket went away mid-send: keep it for the next one
                        pass
                self.backlog += data
                del self.backlog[:-settings.TERMINAL_BACKLOG_BYTES]
        except Exception:  # noqa: BLE001,S110 - the SSH connection ended, whatever the way
            pass
        consumer = self.consumer
        self.close()
        if consumer is not None:
            await consumer.shell_ended()

    async def attach(self, consumer) -> None:
        """The WebSocket `consumer` now shows this shell (any other one is let go); the backlog first."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        previous, self.consumer = self.consumer, consumer
        if previous is not None and previous is not consumer:
            await previous.taken_over()
        if self.backlog:
            data, self.backlog = bytes(self.backlog), bytearray()
            await consumer.send(bytes_data=data)

    def detach(self, consumer) -> None:
        """Its WebSocket closed: keep the shell for the grace period."""
        if self.consumer is not consumer:
            return
        self.consumer = None
        if self.conn is not None:
            self._expiry = asyncio.get_running_loop().call_later(settings.TERMINAL_GRACE_SECONDS, self.close)

    def close(self) -> None:
        """End the shell now (grace over, the instance stopped, the shell exited)."""
        _sessions.pop(self.id, None)
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self._pump is not asyncio.current_task() and not self._pump.done():
            self._pump.cancel()

    def write(self, data: bytes) -> None:
        with contextlib.suppress(Exception):
            self.process.stdin.write(data)

    def resize(self, cols: int, rows: int) -> None:
        with contextlib.suppress(Exception):
            self.process.change_terminal_size(cols, rows)


_sessions: dict[str, ShellSession] = {}


def session_open(*, user_id: str, instance_id: str, conn, process) -> ShellSession:
    session = ShellSession(user_id=user_id, instance_id=instance_id, conn=conn, process=process)
    _sessions[session.id] = session
    return session


def session_find(session_id: str, *, user_id: str, instance_id: str) -> ShellSession | None:
    """The live shell with this id, if it is this user's on this instance (else None: a new shell is opened)."""
    session = _sessions.get(session_id or "")
    if session is None or (session.user_id, session.instance_id) != (user_id, instance_id):
        return None
    return session


def sessions_of_instance(instance_id: str) -> list[ShellSession]:
    return [s for s in _sessions.values() if s.instance_id == instance_id]
