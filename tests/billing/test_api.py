"""Billing API: balance, ledger lines, usage — roles, tenant isolation, constant queries, validation."""
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.models import Meter
from billing.services import compensation_grant, meter_open, meters_close, trial_grant
from core.dbclock import db_now
from tests.factories.billing import fund, set_credit_limit

pytestmark = pytest.mark.django_db

URLS = ["/api/v1/billing/balance/", "/api/v1/billing/transfers/", "/api/v1/billing/usage/"]


def run_meter(org, seconds, cards=1, rate=1_900_000):
    m = meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=cards, rate=rate,
                   opened_at=db_now() - timedelta(seconds=seconds + 5))
    meters_close(instance_id=m.instance_id, at=m.opened_at + timedelta(seconds=seconds))
    return Meter.objects.get(pk=m.pk)


@pytest.mark.parametrize("role,allowed", [("owner", True), ("admin", True), ("member", True), ("billing", True),
                                          ("viewer", False)])
@pytest.mark.parametrize("url", URLS)
def test_roles_and_token_scopes(role, allowed, url, member_factory, session_client_for, token_client_for):
    membership = member_factory(role=role)
    for client in (session_client_for(membership), token_client_for(membership, scope="read")):
        r = client.get(url)
        assert r.status_code == (200 if allowed else 403), r.content
        if not allowed:
            assert r.json()["error"]["code"] == "permission_denied"


@pytest.mark.parametrize("url", URLS)
def test_anonymous_is_refused(url, api_client):
    r = api_client.get(url)
    assert r.status_code in (401, 403) and r.json()["error"]["code"] in ("not_authenticated", "permission_denied")


def test_balance_numbers(settings, member_factory, session_client_for):
    settings.TRIAL_CREDIT_UCNY = 10_000_000
    m = member_factory(role="billing")
    org = m.organization
    trial_grant(org=org, user=m.user)
    fund(org, 5_000_000)
    compensation_grant(org=org, breach_id="b9", amount=250_000)
    set_credit_limit(org, 1_000_000)
    meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=2, rate=1_900_000)
    body = session_client_for(m).get("/api/v1/billing/balance/").json()
    assert body["cash"] == "5.000000" and body["trial"] == "10.000000" and body["compensation"] == "0.250000"
    assert body["grant"] == "0.000000" and body["credit_limit"] == "1.000000"
    assert body["available"] == "16.250000" and body["burn_rate_per_hour"] == "3.800000"
    assert body["exhausts_at"] is not None and body["low_balance_warning"] is False


def test_transfers_are_the_organizations_lines_newest_first_with_direction(member_factory, session_client_for):
    m = member_factory()
    other = member_factory()
    fund(m.organization, 9_000_000)
    fund(other.organization, 1_000_000)
    meter = run_meter(m.organization, 60)
    r = session_client_for(m).get("/api/v1/billing/transfers/")
    body = r.json()
    assert body["count"] == 2
    spend_line, topup_line = body["results"]
    assert topup_line["direction"] == "credit" and topup_line["account"] == "cash"
    assert topup_line["amount"] == "9.000000" and topup_line["code"] == "topup"
    assert spend_line["direction"] == "debit" and spend_line["account"] == "cash"
    assert spend_line["amount"] == "0.031666" and spend_line["meter_id"] == meter.pk
    assert spend_line["instance_id"] == str(meter.instance_id)
    other_body = session_client_for(other).get("/api/v1/billing/transfers/").json()
    assert other_body["count"] == 1 and other_body["results"][0]["amount"] == "1.000000"


def _queries(client, url):
    with CaptureQueriesContext(connection) as ctx:
        r = client.get(url)
    assert r.status_code == 200
    return len(ctx.captured_queries), r.json()


def test_lists_use_constant_queries(member_factory, session_client_for):
    m = member_factory()
    client = session_client_for(m)
    fund(m.organization, 1_000_000_000)
    run_meter(m.organization, 30)
    run_meter(m.organization, 40)
    few_t, body = _queries(client, "/api/v1/billing/transfers/")
    few_u, usage = _queries(client, "/api/v1/billing/usage/")
    assert len(usage["results"]) == 2
    for i in range(48):
        run_meter(m.organization, 10 + i)
    many_t, body = _queries(client, "/api/v1/billing/transfers/")
    many_u, usage = _queries(client, "/api/v1/billing/usage/")
    assert len(body["results"]) == 50 and len(usage["results"]) == 50
    assert (few_t, few_u) == (many_t, many_u)


def test_usage_lines_per_meter_and_window(member_factory, session_client_for):
    m = member_factory()
    org = m.organization
    fund(org, 100_000_000)
    meter = run_meter(org, 3600, cards=2)
    client = session_client_for(m)
    line = client.get("/api/v1/billing/usage/").json()["results"][0]
    assert line["instance_id"] == str(meter.instance_id) and line["accelerator"] == "h100"
    assert line["cards"] == 2 and line["rate"] == "1.900000"
    assert line["seconds"] == 3600 and line["amount"] == "3.800000"
    before = (meter.opened_at - timedelta(days=2)).isoformat()
    empty = client.get("/api/v1/billing/usage/", {"from": before,
                                                  "to": (meter.opened_at - timedelta(days=1)).isoformat()})
    assert empty.json()["count"] == 0
    other = member_factory()
    assert session_client_for(other).get("/api/v1/billing/usage/").json()["count"] == 0


@pytest.mark.parametrize("params,field", [({"from": "yesterday"}, "from"), ({"to": "2026-13-01"}, "to"),
                                          ({"from": "2026-02-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "from"),
                                          # out of the sane range: `to` − 30 days used to overflow (a 500)
                                          ({"to": "0001-01-02T00:00:00Z"}, "to"),
                                          ({"from": "1999-12-31T23:59:59Z"}, "from"),
                                          ({"to": "9999-12-31T23:59:59Z"}, "to"),
                                          ({"to": "9999-12-31T23:59:59-05:00"}, "to")])
def test_usage_bad_input_is_a_validation_error(params, field, member_factory, session_client_for):
    r = session_client_for(member_factory()).get("/api/v1/billing/usage/", params)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "validation_error" and field in err["details"]
