"""The database clock: every deadline is compared with it, so tests move deadlines, not clocks."""
from django.db import connection
from django.utils import timezone


def db_now():
    """now() as the database sees it (UTC, aware); Python's clock on SQLite."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT statement_timestamp()")
            return cur.fetchone()[0]
    return timezone.now()
