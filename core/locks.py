"""PostgreSQL advisory locks: transaction-scoped so that a periodic job runs once even with two beats;
session-scoped to mark work in flight for as long as its connection lives (core/idempotency.py)."""
import contextlib
import hashlib
import logging
import zlib

from django.db import connection

logger = logging.getLogger("cardmix.locks")


def _lock_id(name: str) -> int:
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def _session_lock_id(name: str) -> int:
    # 64 bits: many session locks are held at once (one per request in flight), so crc32 would collide.
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def try_advisory_xact_lock(name: str) -> bool:
    """Take a transaction-scoped advisory lock; False if another session holds it.

    Call inside transaction.atomic().
    """
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [_lock_id(name)])
        return bool(cur.fetchone()[0])


def advisory_xact_lock(name: str) -> None:
    """Wait for a transaction-scoped advisory lock (held until the transaction ends): serialises work on a set of
    rows that has no one row to lock (e.g. an organization's fapiao against its payments). Call inside
    transaction.atomic()."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [_lock_id(name)])


def try_advisory_lock(name: str) -> bool:
    """Take a session-level advisory lock, held until `advisory_unlock(name)` or until the
    connection ends (so a killed process lets go of it); False if another session holds it. Not for use
    behind a transaction-pooling proxy (PgBouncer), which hands the session to others."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s)", [_session_lock_id(name)])
        return bool(cur.fetchone()[0])


def advisory_unlock(name: str) -> None:
    """Release `try_advisory_lock(name)` (see _unlock)."""
    _unlock(_session_lock_id(name))


def _unlock(key: int) -> None:
    """Release a session-level advisory lock. If that fails (the transaction is aborted, the connection broke),
    close the connection: ending the session releases its locks, and a persistent connection must not keep
    one into its next request."""
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", [key])
    except Exception:  # noqa: BLE001 - whatever broke, closing the session releases the lock
        logger.warning("advisory unlock failed; closing the connection to release it", exc_info=True)
        connection.close()


@contextlib.contextmanager
def advisory_lock_held(name: str):
    """Hold a session-level advisory lock for the block: yields True, or False when another session holds
    it. For work that must commit as it goes (e.g. an agent command its node polls for), where a
    transaction-scoped lock cannot be used."""
    # The key of try_advisory_xact_lock(name): a process still using the transaction lock excludes this one.
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s)", [_lock_id(name)])
        held = bool(cur.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            _unlock(_lock_id(name))
