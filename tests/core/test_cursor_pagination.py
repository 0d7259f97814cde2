"""`?cursor=` beside limit/offset (core/pagination.py): keyset pages in the list's order, next/previous links,
stable while rows are added, a 400 for a changed or foreign cursor, and query counts that do not grow."""
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

pytestmark = pytest.mark.django_db

AUDIT = "/api/v1/audit-events/"


def _events(org, n, *, at=None, action="test.event"):
    from tenancy.models import AuditEvent

    made = AuditEvent.objects.bulk_create([AuditEvent(organization=org, action=action, target_id=str(i))
                                           for i in range(n)])
    if at is not None:  # one timestamp for all: the id breaks the ties
        AuditEvent.objects.filter(pk__in=[e.pk for e in made]).update(created_at=at)
    return made


def _path(link):
    parts = urlsplit(link)
    return f"{parts.path}?{parts.query}"


def _walk(client, url, *, key="next"):
    """Every page from `url` on, following `key` links: (ids in order, pages)."""
    ids, pages = [], []
    while url:  # rows by id (or month, for the statements list)
        r = client.get(url)
        assert r.status_code == 200, r.content[:300]
        body = r.json()
        assert body["count"] is None and set(body) == {"count", "next", "previous", "results"}
        pages.append(body)
        ids += [row.get("id", row.get("month")) for row in body["results"]]
        url = _path(body[key]) if body[key] else None
    return ids, pages


@pytest.fixture
def owner_client(member_factory, session_client_for):
    owner = member_factory(role="owner")
    return owner, session_client_for(owner)


def test_cursor_pages_walk_the_list_in_its_order_both_ways(owner_client):
    owner, client = owner_client
    base = timezone.now() - timedelta(hours=1)
    _events(owner.organization, 7, at=base)  # seven ties on created_at
    for i in range(16):
        _events(owner.organization, 1, at=base + timedelta(seconds=i + 1))
    everything = [row["id"] for row in client.get(f"{AUDIT}?limit=500").json()["results"]]
    assert len(everything) == 23

    forward, pages = _walk(client, f"{AUDIT}?limit=5&cursor=")
    assert forward == everything  # same order as limit/offset, nothing twice, nothing left out
    assert [len(p["results"]) for p in pages] == [5, 5, 5, 5, 3]
    assert pages[0]["previous"] is None and pages[-1]["next"] is None
    assert all("offset=" not in (p["next"] or "") for p in pages)
    assert parse_qs(urlsplit(pages[0]["next"]).query)["limit"] == ["5"]

    # From the last page back to the first through the previous links: the same pages, reversed.
    backward, back_pages = _walk(client, _path(pages[-1]["previous"]), key="previous")
    assert [p["results"] for p in back_pages] == [p["results"] for p in reversed(pages[:-1])]
    assert backward == [i for p in reversed(pages[:-1]) for i in (r["id"] for r in p["results"])]
    # A page reached backwards links forward again to the page after it.
    assert client.get(_path(back_pages[0]["next"])).json()["results"] == pages[-1]["results"]


def test_rows_added_while_walking_are_neither_repeated_nor_skipped(owner_client):
    owner, client = owner_client
    base = timezone.now() - timedelta(hours=1)
    for i in range(10):
        _events(owner.organization, 1, at=base + timedelta(seconds=i))
    first = client.get(f"{AUDIT}?limit=4&cursor=").json()
    _events(owner.organization, 3, at=timezone.now())  # newer than everything: before the cursor in a newest-first list
    rest, _ = _walk(client, _path(first["next"]))
    seen = [r["id"] for r in first["results"]] + rest
    assert len(seen) == len(set(seen)) == 10  # offset paging would have shown three rows twice


@pytest.mark.parametrize("mangle", [
    lambda c: c[:-2] + ("AA" if not c.endswith("AA") else "BB"),  # signature changed
    lambda c: "x" + c,  # payload changed
    lambda c: "not-a-cursor",
    lambda c: c.split(":")[0],  # signature dropped
    lambda c: "%00%ff",
])
def test_a_changed_cursor_is_a_400_in_the_error_envelope(owner_client, mangle):
    owner, client = owner_client
    _events(owner.organization, 6)
    cursor = parse_qs(urlsplit(client.get(f"{AUDIT}?limit=2&cursor=").json()["next"]).query)["cursor"][0]
    r = client.get(AUDIT, {"limit": 2, "cursor": mangle(cursor)})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "validation_error" and list(error["details"]) == ["cursor"]


def test_another_organizations_cursor_reveals_nothing(member_factory, session_client_for):
    alice, bob = member_factory(role="owner"), member_factory(role="owner")
    _events(alice.organization, 6, action="alice.secret")
    _events(bob.organization, 6, action="bob.event")
    alice_client, bob_client = session_client_for(alice), session_client_for(bob)
    alice_next = alice_client.get(f"{AUDIT}?limit=2&cursor=").json()["next"]
    r = bob_client.get(_path(alice_next))
    assert r.status_code == 400 and list(r.json()["error"]["details"]) == ["cursor"]
    assert "alice" not in r.content.decode()
    # Nor does a cursor of one list open another list of the same organization.
    cursor = parse_qs(urlsplit(alice_next).query)["cursor"][0]
    assert alice_client.get("/api/v1/billing/transfers/", {"cursor": cursor}).status_code == 400


def test_cursor_and_offset_together_is_a_400(owner_client):
    _, client = owner_client
    r = client.get(f"{AUDIT}?cursor=&offset=5")
    assert r.status_code == 400 and "offset" in r.json()["error"]["details"]
    r = client.get(f"{AUDIT}?cursor=&cursor=")
    assert r.status_code == 400 and "cursor" in r.json()["error"]["details"]


def test_cursor_pages_of_other_lists(owner_client):
    """Lists ordered by an id (ledger), by an expression (members, by role) and by created_at (volumes) page alike."""
    from billing.ledger import org_account_ids, platform_id
    from billing.models import Transfer
    from tenancy.models import Membership
    from tests.factories.tenancy import UserFactory

    owner, client = owner_client
    cash = org_account_ids([owner.organization_id])[owner.organization_id]["cash"]
    Transfer.objects.bulk_create([Transfer(key=f"cursor-test:{i}", debit_account_id=platform_id("payments_clearing"),
                                           credit_account_id=cash, amount=1_000_000 + i, code="topup")
                                  for i in range(9)])
    for role in ("viewer", "admin", "member", "viewer", "admin"):
        Membership.objects.create(organization=owner.organization, user=UserFactory(), role=role)
    for url in ("/api/v1/billing/transfers/", "/api/v1/organizations/current/members/"):
        everything = [row.get("id", row.get("month")) for row in client.get(f"{url}?limit=500").json()["results"]]
        assert len(everything) >= 5, url
        walked, pages = _walk(client, f"{url}?limit=2&cursor=")
        assert walked == everything, url
        back, _ = _walk(client, _path(pages[-1]["previous"]), key="previous")
        assert back == [r.get("id", r.get("month")) for p in reversed(pages[:-1]) for r in p["results"]], url


def test_cursor_queries_do_not_grow_with_the_list(owner_client):
    owner, client = owner_client

    def count(url):
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(url).status_code == 200
        return len(ctx.captured_queries)

    _events(owner.organization, 3)
    few = count(f"{AUDIT}?limit=2&cursor=")
    cursor_few = count(_path(client.get(f"{AUDIT}?limit=2&cursor=").json()["next"]))
    _events(owner.organization, 60)
    many = count(f"{AUDIT}?limit=50&cursor=")
    cursor_many = count(_path(client.get(f"{AUDIT}?limit=50&cursor=").json()["next"]))
    assert few == many == cursor_few == cursor_many


def test_a_list_built_in_python_pages_by_cursor_too(owner_client):
    """e.g. the statement months: the rows' places are the keys."""
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory

    from core.pagination import EnvelopePagination

    owner, client = owner_client
    assert client.get("/api/v1/billing/statements/?cursor=").status_code == 200
    rows = [{"month": f"2026-{m:02d}"} for m in range(12, 0, -1)]

    def page(query):
        request = Request(APIRequestFactory().get("/api/v1/billing/statements/", query))
        request.org, request.user = owner.organization, owner.user
        paginator = EnvelopePagination()
        got = paginator.paginate_queryset(rows, request)
        body = paginator.get_paginated_response(got).data
        return body, (lambda link: dict(parse_qs(urlsplit(link).query, keep_blank_values=True)) if link else None)

    seen, query = [], {"limit": "5", "cursor": ""}
    while query:
        body, params = page(query)
        seen += [r["month"] for r in body["results"]]
        query = {k: v[0] for k, v in params(body["next"]).items()} if body["next"] else None
    assert seen == [r["month"] for r in rows]
    body, params = page({k: v[0] for k, v in params(body["previous"]).items()})
    assert [r["month"] for r in body["results"]] == seen[5:10]
