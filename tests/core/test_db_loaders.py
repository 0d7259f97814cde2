"""core/db_loaders.py: psycopg's C loaders give what Django's Python ones gave."""
import datetime

import pytest
from django.db import connection
from django.db.backends.postgresql.psycopg_any import register_tzloader

from core.db_loaders import UtcTimestamptzLoader

pytestmark = pytest.mark.django_db

VALUES = ("'2026-12-08 01:02:03.000004+00'", "'2026-01-01 10:00:00.5+08'", "'0001-01-01 00:00:00+00'",
          "'9999-12-31 23:59:59.999999+00'", "now()", "NULL")


def _read(cursor):
    cursor.execute("SELECT " + ", ".join(f"{v}::timestamptz" for v in VALUES) + ", json_build_array(1, 'a', null)")
    return cursor.fetchone()


def test_timestamps_and_json_read_as_django_reads_them():
    connection.ensure_connection()
    assert connection.connection.adapters.get_loader(1184, 0) is UtcTimestamptzLoader
    with connection.cursor() as cursor:
        fast = _read(cursor)
    with connection.connection.cursor() as cursor:  # Django's own loader on this cursor only
        register_tzloader(connection.timezone, cursor)
        slow = _read(cursor)
    assert fast[:4] == slow[:4] and fast[5] is None and fast[-1] == [1, "a", None]
    assert all(v.tzinfo is datetime.UTC for v in fast[:5])
