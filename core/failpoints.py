"""Named failpoints for crash tests (SPEC §3).

`CARDMIX_FAILPOINT=provision:after_claim` (comma-separated names) makes the process kill itself
with SIGKILL when it reaches that point, as a real crash would. Tests inside one process use
`armed({...})`, which raises FailpointCrash instead.
"""
import contextlib
import os
import signal
import threading

_local = threading.local()


class FailpointCrash(RuntimeError):
    """Raised at an armed in-process failpoint."""


def _env_points() -> set[str]:
    return {p.strip() for p in os.environ.get("CARDMIX_FAILPOINT", "").split(",") if p.strip()}


def failpoint(name: str) -> None:
    """Crash here if this failpoint is armed."""
    if name in getattr(_local, "armed", ()):
        raise FailpointCrash(name)
    if name in _env_points():
        os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def armed(names):
    """Arm failpoints for this thread: reaching one raises FailpointCrash."""
    previous = getattr(_local, "armed", frozenset())
    _local.armed = frozenset(previous) | frozenset(names)
    try:
        yield
    finally:
        _local.armed = previous
