"""PostgreSQL advisory locks so that a periodic job runs once even with two beats."""
import zlib

from django.db import connection


def _lock_id(name: str) -> int:
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def try_advisory_xact_lock(name: str) -> bool:
    """Take a transaction-scoped advisory lock; False if another session holds it.

    Call inside transaction.atomic(). SQLite (development) has a single writer anyway and
    always answers True.
    """
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [_lock_id(name)])
        return bool(cur.fetchone()[0])
