"""Products API: roles, tenant 404, validation, idempotency, constant queries on lists."""
from datetime import date, datetime
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.choices import TransferCode
from billing.credits import cash_credit
from billing.funds import spend
from billing.models_products import Invoice, SponsorshipProposal
from tests.core.test_api_conventions import assert_error
from tests.factories.billing_products import posted_at
from tests.factories.inventory import accelerator

pytestmark = pytest.mark.django_db

SPONSORSHIPS = "/api/v1/billing/sponsorships/"
INVOICES = "/api/v1/billing/invoices/"
STATEMENTS = "/api/v1/billing/statements/"
BODY = {"title": "LLM pretraining", "abstract": "Open weights.", "accelerator": "h100-sxm-80g", "card_hours": 100}
READ_ROLES = [("owner", 200), ("admin", 200), ("member", 200), ("billing", 200), ("viewer", 403)]


@pytest.fixture(autouse=True)
def _catalog():
    accelerator("h100-sxm-80g")


@pytest.mark.parametrize("role,status", [("owner", 201), ("admin", 201), ("billing", 201), ("member", 403),
                                         ("viewer", 403)])
def test_who_may_submit(member_factory, session_client_for, role, status):
    response = session_client_for(member_factory(role=role)).post(SPONSORSHIPS, BODY, format="json")
    assert response.status_code == status, response.content
    if status == 201:
        assert response.json()["state"] == "submitted" and response.json()["granted_amount"] is None
    else:
        assert_error(response, 403, "permission_denied")
        assert not SponsorshipProposal.objects.exists()


@pytest.mark.parametrize("role,status", READ_ROLES)
def test_who_may_read(member_factory, session_client_for, role, status):
    client = session_client_for(member_factory(role=role))
    for url in (SPONSORSHIPS, INVOICES, STATEMENTS, f"{STATEMENTS}2025-01/", f"{STATEMENTS}2025-01.csv"):
        assert client.get(url).status_code == status, url


def test_anonymous_is_refused(api_client):
    for url in (SPONSORSHIPS, INVOICES, STATEMENTS, f"{STATEMENTS}2025-01/"):
        assert_error(api_client.get(url), 401, "not_authenticated")


def test_submit_validation_errors(member_factory, session_client_for):
    client = session_client_for(member_factory(role="owner"))
    err = assert_error(client.post(SPONSORSHIPS, {**BODY, "card_hours": 0, "title": ""}, format="json"),
                       400, "validation_error")
    assert {"card_hours", "title"} <= set(err["details"])
    err = assert_error(client.post(SPONSORSHIPS, {**BODY, "accelerator": "no-such-card"}, format="json"),
                       400, "validation_error")
    assert set(err["details"]) == {"accelerator"}
    assert not SponsorshipProposal.objects.exists()


def test_submit_for_an_accelerator_without_a_price_is_400(member_factory, session_client_for):
    accelerator("mtt-s4000")  # in the catalog, never priced: its proposal could never be approved
    client = session_client_for(member_factory(role="owner"))
    err = assert_error(client.post(SPONSORSHIPS, {**BODY, "accelerator": "mtt-s4000"}, format="json"),
                       400, "validation_error")
    assert set(err["details"]) == {"accelerator"}
    assert not SponsorshipProposal.objects.exists()


def test_submit_is_idempotent(member_factory, session_client_for):
    client = session_client_for(member_factory(role="owner"))
    first = client.post(SPONSORSHIPS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="sp-1")
    again = client.post(SPONSORSHIPS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="sp-1")
    assert first.status_code == again.status_code == 201 and first.json() == again.json()
    assert SponsorshipProposal.objects.count() == 1


def test_other_organizations_objects_are_404(member_factory, session_client_for):
    mine, theirs = member_factory(role="owner"), member_factory(role="owner")
    client = session_client_for(mine)
    theirs_client = session_client_for(theirs)
    proposal_id = theirs_client.post(SPONSORSHIPS, BODY, format="json").json()["id"]
    invoice = Invoice.objects.create(organization=theirs.organization, period=date(2025, 1, 1), amount_due=5)
    assert_error(client.get(f"{SPONSORSHIPS}{proposal_id}/"), 404, "not_found")
    assert_error(client.post(f"{INVOICES}{invoice.pk}/pay/"), 404, "not_found")
    assert client.get(SPONSORSHIPS).json()["count"] == 0 and client.get(INVOICES).json()["count"] == 0
    assert theirs_client.get(f"{SPONSORSHIPS}{proposal_id}/").status_code == 200
    # Their ledger activity is not on my statements.
    cash_credit(org=theirs.organization, amount=10_000_000, key="theirs", code="topup")
    assert theirs_client.get(STATEMENTS).json()["count"] == 1
    assert client.get(STATEMENTS).json()["count"] == 0


@pytest.mark.parametrize("bad,status", [("2025-13", 400), ("25-01", 400), ("2025-1", 400), ("abcd-ef", 400),
                                        ("1999-12", 400), ("2999-01", 404),
                                        # future months are 404, even the last one (its end is past datetime's)
                                        ("9999-11", 404), ("9999-12", 404)])
def test_bad_months(member_factory, session_client_for, bad, status):
    client = session_client_for(member_factory(role="billing"))
    code = "validation_error" if status == 400 else "not_found"
    assert_error(client.get(f"{STATEMENTS}{bad}/"), status, code)
    assert_error(client.get(f"{STATEMENTS}{bad}.csv"), status, code)


def test_statement_json_and_csv(member_factory, session_client_for):
    owner = member_factory(role="billing")
    org = owner.organization
    with posted_at(datetime(2025, 1, 15, tzinfo=ZoneInfo("Asia/Shanghai"))):
        cash_credit(org=org, amount=20_000_000, key="jan", code="topup", payment_ref="pi_x")
        spend(org=org, amount=1_234_567, key="use", code=TransferCode.METER)
    client = session_client_for(owner)
    months = client.get(STATEMENTS).json()
    assert months["results"] == [{"month": "2025-01"}]
    body = client.get(f"{STATEMENTS}2025-01/").json()
    assert body["month"] == "2025-01" and body["time_zone"] == "Asia/Shanghai"
    assert body["topups"][0]["amount"] == "20.000000"
    assert body["other_charges"][0]["amount"] == "1.234567"
    assert {a["account"]: a["closing"] for a in body["accounts"]}["cash"] == "18.765433"
    csv_response = client.get(f"{STATEMENTS}2025-01.csv")
    assert csv_response.status_code == 200 and csv_response["Content-Type"].startswith("text/csv")
    assert csv_response.content.startswith(b"section,date,ref,")
    assert client.get(f"{STATEMENTS}2025-01.csv").content == csv_response.content


def _count_queries(client, url):
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def test_lists_use_constant_queries(member_factory, session_client_for):
    owner = member_factory(role="owner")
    org = owner.organization
    client = session_client_for(owner)

    def add(n):
        have = SponsorshipProposal.objects.filter(organization=org).count()
        for i in range(have, n):
            SponsorshipProposal.objects.create(organization=org, title=f"p{i}", abstract="a",
                                               accelerator="h100-sxm-80g", card_hours=1)
            Invoice.objects.create(organization=org, period=date(2000 + i, 1, 1), amount_due=i)
            with posted_at(datetime(2000 + i, 6, 1, tzinfo=ZoneInfo("UTC"))):
                cash_credit(org=org, amount=1_000_000, key=f"m{i}", code="topup")

    add(2)
    small = [_count_queries(client, url) for url in (SPONSORSHIPS, INVOICES, STATEMENTS)]
    add(50)
    large = [_count_queries(client, url) for url in (SPONSORSHIPS, INVOICES, STATEMENTS)]
    assert small == large
    assert client.get(STATEMENTS).json()["count"] == 50
