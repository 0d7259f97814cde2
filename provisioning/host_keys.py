"""The instance sshd's host key, checked by every platform connection to it (SSH gateway, web terminal).

A group's key (NodeGroup.ssh_host_key) comes from the driver at prepare when it reports one; otherwise the first
platform connection pins the key it was shown (trust on first use, right after the container or node was
prepared, over the node network). From then on a connection offers asyncssh only that key: a different one
(a host in the middle, a swapped machine) fails before the platform key authenticates or a keystroke is sent,
and is refused with a clear message and an `instance.host_key_mismatch` audit row. A new prepare clears the pin
(a new container has new keys).
"""
import asyncio

import asyncssh
from django.utils.translation import gettext_lazy

MISMATCH_MESSAGE = gettext_lazy(
    "The instance's SSH host key is not the one the platform recorded for it (expected {expected}, offered "
    "{offered}); refusing to connect. If the instance was rebuilt outside the platform, restart it from the "
    "console; otherwise tell the operator.")


class HostKeyMismatch(Exception):
    def __init__(self, expected: str, offered: str):
        self.expected, self.offered = expected, offered
        super().__init__(MISMATCH_MESSAGE.format(expected=expected, offered=offered or "none"))


def key_line(value) -> str:
    """A public key as one normalised OpenSSH line, or "" for anything that is not one."""
    if not isinstance(value, str) or not value.strip():
        return ""
    try:
        line = asyncssh.import_public_key(value.strip()).export_public_key("openssh").decode()
    except (asyncssh.KeyImportError, ValueError):
        return ""
    return " ".join(line.split()[:2])  # algorithm and key: a comment is no part of it


def fingerprint(line: str) -> str:
    return asyncssh.import_public_key(line).get_fingerprint("sha256") if line else ""


def known_hosts(pinned: str):
    """asyncssh's `known_hosts` for a connection: only the pinned key, or None (first use: any, then pinned)."""
    return ([asyncssh.import_public_key(pinned)], [], []) if pinned else None


async def offered_key(host: str, port: int) -> str:
    """The key the sshd at host:port offers now (for the refusal's message and audit row); "" if none."""
    try:
        key = await asyncio.wait_for(asyncssh.get_server_host_key(host, port), timeout=10)
    except (OSError, asyncssh.Error, TimeoutError, ValueError):
        return ""
    return key_line(key.export_public_key("openssh").decode()) if key else ""


async def connect_checked(host: str, port: int, *, pinned: str, pin, refuse, **kwargs) -> asyncssh.SSHClientConnection:
    """asyncssh.connect to the instance's sshd with its host key checked.

    pinned: the group's key ("" none yet); pin(line) -> the group's key after pinning `line` if none was (an async
    callable: the caller's database thread); refuse(expected_fp, offered_fp) records the refusal (async).
    Raises HostKeyMismatch when the key differs."""
    try:
        conn = await asyncssh.connect(host, port, known_hosts=known_hosts(pinned), **kwargs)
    except asyncssh.HostKeyNotVerifiable:
        offered = await offered_key(host, port)
        await refuse(fingerprint(pinned), fingerprint(offered))
        raise HostKeyMismatch(fingerprint(pinned), fingerprint(offered)) from None
    if not pinned:
        shown = key_line(conn.get_server_host_key().export_public_key("openssh").decode())
        kept = await pin(shown)
        if kept != shown:  # another connection pinned a different key first
            conn.close()
            await refuse(fingerprint(kept), fingerprint(shown))
            raise HostKeyMismatch(fingerprint(kept), fingerprint(shown))
    return conn
