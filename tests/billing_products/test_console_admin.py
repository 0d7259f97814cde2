"""Console pages (statements HTML/CSV, sponsorship form, invoices) and the admin's approve action."""
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from django.test import Client

from billing.choices import TransferCode
from billing.credits import cash_credit
from billing.models import Transfer
from billing.models_products import SponsorshipProposal, SponsorshipState
from tests.factories.billing_products import posted_at
from tests.factories.inventory import accelerator
from tests.factories.tenancy import UserFactory
from tests.factories.tenancy import login_client as _client

pytestmark = pytest.mark.django_db



def test_statement_pages(member_factory):
    owner = member_factory(role="billing")
    with posted_at(datetime(2025, 1, 15, tzinfo=ZoneInfo("Asia/Shanghai"))):
        cash_credit(org=owner.organization, amount=12_345_678, key="c", code="topup", payment_ref="pi_9")
    client = _client(owner)
    listing = client.get("/billing/statements/")
    assert listing.status_code == 200 and b"2025-01" in listing.content
    page = client.get("/billing/statements/2025-01/")
    assert page.status_code == 200 and "¥12.35".encode() in page.content  # rounded for display only
    csv_body = client.get("/billing/statements/2025-01/csv/")
    assert csv_body["Content-Type"].startswith("text/csv") and b"12.345678" in csv_body.content
    assert client.get("/billing/statements/2025-13/").status_code == 404
    viewer = _client(member_factory(role="viewer"))
    refused = viewer.get("/billing/statements/")
    # A viewer reads no billing at all: 404, as /billing/ and /billing/topup/ answer it (the styled page).
    assert refused.status_code == 404 and "There is nothing here" in refused.content.decode()
    dashboard = viewer.get("/dashboard/").content.decode()
    assert 'href="/billing/"' not in dashboard and 'href="/instances/"' in dashboard
    billing_member = _client(member_factory(role="billing")).get("/dashboard/").content.decode()
    assert 'href="/billing/"' in billing_member and 'href="/instances/"' not in billing_member


def test_sponsorship_form_and_invoices(member_factory):
    accelerator("h100-sxm-80g")
    owner = member_factory(role="owner")
    client = _client(owner)
    bad = client.post("/billing/sponsorships/", {"title": "x", "abstract": "y", "accelerator": "h100-sxm-80g",
                                                 "card_hours": 0})
    assert bad.status_code == 200 and not SponsorshipProposal.objects.exists()
    ok = client.post("/billing/sponsorships/", {"title": "Climate", "abstract": "Models", "accelerator": "h100-sxm-80g",
                                                "card_hours": 5})
    assert ok.status_code == 302
    assert SponsorshipProposal.objects.get().organization_id == owner.organization_id
    member = _client(member_factory(role="member", org=owner.organization))
    assert member.get("/billing/sponsorships/").status_code == 200
    assert member.post("/billing/sponsorships/", {"title": "t", "abstract": "a", "accelerator": "h100-sxm-80g",
                                                  "card_hours": 1}).status_code == 403
    assert client.get("/billing/invoices/").status_code == 200


def test_statement_page_dates_packages_in_the_billing_time_zone(member_factory):
    import uuid

    from billing.models_products import Package
    from billing.products.packages import package_start
    from tests.factories.billing_products import H100, package_amount

    owner = member_factory(role="billing")
    when = datetime(2025, 3, 1, 2, 0, tzinfo=ZoneInfo("Asia/Shanghai"))  # Feb 28, 18:00 in UTC
    with posted_at(when):
        cash_credit(org=owner.organization, amount=package_amount(H100), key="k", code="topup")
        package = package_start(org=owner.organization, instance_id=uuid.uuid4(), items=[H100])
    Package.objects.filter(pk=package.pk).update(starts_at=when)
    page = _client(owner).get("/billing/statements/2025-03/").content.decode()
    assert "2025-03-01 02:00" in page and "2025-02-28 18:00" not in page


def test_sponsorship_form_offers_only_priced_accelerators(member_factory, catalog):
    page = _client(member_factory(role="owner")).get("/billing/sponsorships/").content.decode()
    assert 'value="h100-sxm-80g"' in page and 'value="ascend-910b"' in page
    assert 'value="mtt-s4000"' not in page and 'value="bi-v100"' not in page


def test_admin_approve_asks_for_a_note_then_grants_once(member_factory):
    accelerator("h100-sxm-80g")
    owner = member_factory(role="owner")
    proposal = SponsorshipProposal.objects.create(organization=owner.organization, title="T", abstract="A",
                                                  accelerator="h100-sxm-80g", card_hours=3)
    staff = UserFactory(is_staff=True, is_superuser=True)
    admin = Client()
    admin.force_login(staff)
    url = "/admin/billing/sponsorshipproposal/"
    form = admin.post(url, {"action": "approve", "_selected_action": [str(proposal.pk)]})
    assert form.status_code == 200 and b"note" in form.content
    assert not Transfer.objects.filter(code=TransferCode.GRANT).exists()
    for _ in range(2):
        done = admin.post(url, {"action": "approve", "_selected_action": [str(proposal.pk)], "apply": "1",
                                "note": "Welcome aboard"})
        assert done.status_code == 302
    proposal.refresh_from_db()
    assert proposal.state == SponsorshipState.APPROVED and proposal.staff_note == "Welcome aboard"
    assert proposal.decided_by == staff
    assert Transfer.objects.filter(code=TransferCode.GRANT, key=f"grant:{proposal.pk}").count() == 1


def test_invoice_pay_button_opens_the_payment_page_for_that_invoice_only(member_factory, settings):
    from datetime import date

    from billing.models_products import Invoice, InvoiceState

    settings.TOPUP_MIN_UCNY = 10_000_000
    owner = member_factory(role="owner")
    big = Invoice.objects.create(organization=owner.organization, period=date(2025, 4, 1), amount_due=12_345_678)
    small = Invoice.objects.create(organization=owner.organization, period=date(2025, 5, 1), amount_due=3_456_789)
    paid = Invoice.objects.create(organization=owner.organization, period=date(2025, 3, 1), amount_due=1,
                                  state=InvoiceState.PAID)
    client = _client(owner)
    listing = client.get("/billing/invoices/").content.decode()
    assert f"/billing/topup/?invoice={big.pk}" in listing and f"/billing/topup/?invoice={small.pk}" in listing
    assert f"?invoice={paid.pk}" not in listing

    page = client.get(f"/billing/topup/?invoice={big.pk}").content.decode()
    assert "Pay invoice 2025-04" in page and 'value="12.35" readonly' in page
    assert f'data-api-url="/api/v1/billing/invoices/{big.pk}/pay/"' in page and "stays on your balance" not in page
    small_page = client.get(f"/billing/topup/?invoice={small.pk}").content.decode()
    assert 'value="10.00" readonly' in small_page and "stays on your balance" in small_page
    again = client.get(f"/billing/topup/?invoice={paid.pk}")
    assert again.status_code == 302 and again["Location"] == "/billing/invoices/"
    assert "already paid" in client.get("/billing/invoices/").content.decode()
    Invoice.objects.filter(pk=paid.pk).update(state=InvoiceState.SUPERSEDED)
    client.get(f"/billing/topup/?invoice={paid.pk}")
    assert "included in a later month" in client.get("/billing/invoices/").content.decode()
    assert 'data-api-url="/api/v1/billing/topups/"' in client.get("/billing/topup/").content.decode()

    # Another organization's invoice is a 404; a member sees invoices but no Pay button (cannot pay).
    stranger = _client(member_factory(role="owner"))
    assert stranger.get(f"/billing/topup/?invoice={big.pk}").status_code == 404
    assert stranger.get("/billing/topup/?invoice=not-a-uuid").status_code == 404
    member_listing = _client(member_factory(role="member", org=owner.organization)).get("/billing/invoices/")
    assert member_listing.status_code == 200 and "2025-04" in member_listing.content.decode()
    assert "?invoice=" not in member_listing.content.decode()


def test_pages_link_a_served_favicon_and_the_credit_limit_field_says_its_unit(admin_client, member_factory):
    page = admin_client.get("/login/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg"' in page
    icon = admin_client.get("/static/favicon.svg")
    assert icon.status_code == 200 and b"<svg" in b"".join(icon.streaming_content)
    org = member_factory(role="owner").organization
    from billing.models import BillingProfile

    BillingProfile.objects.get_or_create(organization=org)
    form = admin_client.get(f"/admin/billing/billingprofile/{org.pk}/change/").content.decode()
    assert "Credit limit (CNY)" in form and 'value="0.000000"' in form  # typed in CNY now, not µCNY
