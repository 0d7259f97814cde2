"""core/db_loaders.py: psycopg's C loaders give what Django's Python ones gave, and the count beside a page
(core.pagination.QuerySetKeyset.page_and_count) is the list's count."""
import datetime

import pytest
from django.db import connection
from django.db.backends.postgresql.psycopg_any import register_tzloader

from core.db_loaders import UtcTimestamptzLoader
from core.pagination import QuerySetKeyset

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


def test_the_count_beside_the_page_is_the_lists_count(member_factory):
    from provisioning.models import Instance
    from tests.factories.provisioning import InstanceFactory

    owner = member_factory(role="owner")
    for i in range(5):
        InstanceFactory(organization=owner.organization, name=f"n-{i}")

    qs = Instance.objects.filter(organization=owner.organization).order_by("-created_at", "-id")
    for rows_of in (qs, qs.values("id", "name"), qs.values_list("id", "name")):
        keyset = QuerySetKeyset(rows_of)
        page, count = keyset.page_and_count(1, 2)
        assert count == 5 and list(page) == list(keyset.page(1, 2))
        assert keyset.page_and_count(5, 2) == ([], 5) and keyset.page_and_count(0, 2)[1] == 5
    # DISTINCT runs after the window: a list that a join doubles is counted apart, without its duplicates.
    from provisioning.models import InstanceEvent

    one = Instance.objects.get(name="n-1")
    InstanceEvent.objects.bulk_create([InstanceEvent(instance=one, from_state="", to_state=s, reason="test",
                                                     created_at=one.created_at)
                                       for s in ("pending", "provisioning")])
    doubled = QuerySetKeyset(qs.filter(events__to_state__in=["pending", "provisioning"]).distinct())
    assert doubled.page_and_count(0, 10) == ([one], 1)
