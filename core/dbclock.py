"""The database clock: every deadline is compared with it, so tests move deadlines, not clocks."""
from django.db import connection


def db_now():
    """now() as the database sees it (UTC, aware)."""
    with connection.cursor() as cur:
        cur.execute("SELECT statement_timestamp()")
        return cur.fetchone()[0]


def db_time(text):
    """A timestamptz the database handed over as text (inside a JSON value, e.g. "2026-11-20 10:30:15.0005+00")
    as an aware datetime; None stays None."""
    from datetime import datetime

    return None if text is None else datetime.fromisoformat(text)
