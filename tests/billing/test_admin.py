"""The operators' billing admin: no Stripe client secret shown, no 500 on a negative credit limit, audited
write-off reviews, an undeletable Stripe event log, and list pages that do not query per row."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.models import BillingProfile, WriteOff
from billing.models_payments import StripeEvent, TopUp
from tenancy.models import AuditEvent
from tests.factories.billing import MeterFactory
from tests.factories.tenancy import OrganizationFactory

pytestmark = pytest.mark.django_db


def _topup(org, n=0):
    return TopUp.objects.create(organization=org, amount=100_000_000, amount_fen=10000,
                                stripe_payment_intent_id=f"pi_admin_{org.pk}_{n}",
                                client_secret=f"pi_admin_{n}_secret_doNotShow")


def _write_off(org, n=0):
    meter = MeterFactory(organization=org)
    return WriteOff.objects.create(meter=meter, organization=org, key=f"meter:{meter.pk}:{n}", seconds=60, amount=31_666)


def test_topup_admin_never_shows_the_client_secret(operator_client):
    topup = _topup(OrganizationFactory())
    page = operator_client.get(f"/admin/billing/topup/{topup.pk}/change/").content.decode()
    assert topup.stripe_payment_intent_id in page and "_secret_" not in page


def test_a_negative_credit_limit_is_a_form_error_not_a_500(operator_client):
    org = OrganizationFactory()
    BillingProfile.objects.get_or_create(organization=org)
    url = f"/admin/billing/billingprofile/{org.pk}/change/"
    response = operator_client.post(url, {"credit_limit": "-1"})
    assert response.status_code == 200 and "cannot be negative" in response.content.decode()
    assert operator_client.post(url, {"credit_limit": "5000"}).status_code == 302  # CNY
    assert BillingProfile.objects.get(pk=org.pk).credit_limit == 5_000_000_000
    assert AuditEvent.objects.filter(action="billing.credit_limit_set", actor=operator_client.user).count() == 1


def test_the_credit_limit_is_shown_and_typed_in_cny(operator_client):
    """Before: the page showed and took raw µCNY ("10000000000" for 10,000 CNY), one digit off from a tenfold limit."""
    org = OrganizationFactory()
    BillingProfile.objects.update_or_create(organization=org, defaults={"credit_limit": 10_000_000_000})
    url = f"/admin/billing/billingprofile/{org.pk}/change/"
    page = operator_client.get(url).content.decode()
    assert 'value="10000.000000"' in page and "10000000000" not in page and "Credit limit (CNY)" in page
    for bad in ("abc", "1.1234567", "NaN", "Infinity", "1e999999", "", "9" * 30):
        response = operator_client.post(url, {"credit_limit": bad})
        assert response.status_code == 200 and 'class="errorlist' in response.content.decode(), bad
    assert BillingProfile.objects.get(pk=org.pk).credit_limit == 10_000_000_000
    assert operator_client.post(url, {"credit_limit": " 2500.000001 "}).status_code == 302
    assert BillingProfile.objects.get(pk=org.pk).credit_limit == 2_500_000_001
    event = AuditEvent.objects.get(action="billing.credit_limit_set")
    assert event.details == {"old": 10_000_000_000, "new": 2_500_000_001}
    # Saving the page unchanged changes nothing.
    assert operator_client.post(url, {"credit_limit": "2500.000001"}).status_code == 302
    assert AuditEvent.objects.filter(action="billing.credit_limit_set").count() == 1


def test_meter_and_write_off_pages_show_cny(operator_client):
    org = OrganizationFactory()
    write_off = _write_off(org)
    meter = write_off.meter
    page = operator_client.get(f"/admin/billing/meter/{meter.pk}/change/").content.decode()
    from core.money import format_ucny
    assert f'<div class="readonly">{format_ucny(meter.rate)}</div>' in page and f">{meter.rate}<" not in page
    page = operator_client.get(f"/admin/billing/writeoff/{write_off.pk}/change/").content.decode()
    assert '<div class="readonly">0.031666</div>' in page and ">31666<" not in page


def test_write_off_review_is_audited_and_stripe_events_cannot_be_deleted(operator_client):
    org = OrganizationFactory()
    write_off = _write_off(org)
    response = operator_client.post("/admin/billing/writeoff/", {
        "form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-0-id": str(write_off.pk), "form-0-reviewed": "on",
        "_save": "Save"})
    assert response.status_code == 302
    assert WriteOff.objects.get(pk=write_off.pk).reviewed
    event = AuditEvent.objects.get(action="billing.write_off_review")
    assert (event.actor_id, event.organization_id, event.details["reviewed"]) == (operator_client.user.pk, org.pk, True)
    stripe_event = StripeEvent.objects.create(id="evt_admin_1", type="payment_intent.succeeded", topup=_topup(org))
    assert operator_client.post(f"/admin/billing/stripeevent/{stripe_event.pk}/delete/",
                                {"post": "yes"}).status_code == 403
    assert StripeEvent.objects.filter(pk="evt_admin_1").exists()


@pytest.mark.parametrize("url", ["/admin/billing/writeoff/", "/admin/billing/stripeevent/"])
def test_billing_lists_do_not_query_per_row(operator_client, url):
    def add_rows(start, n):
        for i in range(start, start + n):
            org = OrganizationFactory()
            _write_off(org, i)
            StripeEvent.objects.create(id=f"evt_list_{i}", type="payment_intent.succeeded", topup=_topup(org, i))

    add_rows(0, 1)
    with CaptureQueriesContext(connection) as few:
        assert operator_client.get(url).status_code == 200
    add_rows(1, 4)
    with CaptureQueriesContext(connection) as many:
        assert operator_client.get(url).status_code == 200
    assert len(many) == len(few)


def test_a_view_only_operator_cannot_refund_a_top_up(monkeypatch):
    """Before: the top-up list's Refund action ran for staff who could only view top-ups (Django offers an action
    without allowed_permissions to anyone who can open the list) and sent the refund to Stripe."""
    from django.contrib.auth.models import Permission
    from django.test import Client

    from billing.payments import admin as payments_admin
    from tests.factories.tenancy import UserFactory

    calls = []
    monkeypatch.setattr(payments_admin, "topup_refund", lambda **kwargs: calls.append(kwargs))
    topup = _topup(OrganizationFactory())
    viewer = UserFactory(is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(content_type__app_label="billing", codename="view_topup"))
    client = Client()
    client.force_login(viewer)
    assert client.get("/admin/billing/topup/").status_code == 200
    client.post("/admin/billing/topup/", {"action": "refund", "_selected_action": [str(topup.pk)], "apply": "1",
                                          "amount": "10.00"})
    assert calls == []


def test_topup_package_invoice_and_sponsorship_pages_show_cny(operator_client):
    """Before: their detail pages showed raw µCNY (a 100 CNY top-up's amount as 100000000, its fen as 10000), a
    package's amount and rate, an invoice's amount due and a sponsorship's grant likewise; the write-off page's
    title read "write-off 31666 µCNY"."""
    import uuid
    from datetime import date, timedelta

    from django.utils import timezone

    from billing.models_products import Invoice, Package, SponsorshipProposal

    org = OrganizationFactory()
    topup = _topup(org)
    TopUp.objects.filter(pk=topup.pk).update(amount_received_fen=10000, refunded_fen=2550)
    page = operator_client.get(f"/admin/billing/topup/{topup.pk}/change/").content.decode()
    assert '<div class="readonly">100.000000</div>' in page and '<div class="readonly">25.500000</div>' in page
    assert ">100000000<" not in page and ">10000<" not in page and ">2550<" not in page
    assert "_secret_" not in page
    now = timezone.now()
    package = Package.objects.create(organization=org, instance_id=uuid.uuid4(), rate_per_hour=2_470_000,
                                     amount=720 * 2_470_000, items=[{"accelerator": "h100-sxm-80g", "cards": 2,
                                                                     "rate": 1_235_000}],
                                     starts_at=now, ends_at=now + timedelta(days=30))
    page = operator_client.get(f"/admin/billing/package/{package.pk}/change/").content.decode()
    assert '<div class="readonly">1778.400000</div>' in page and '<div class="readonly">2.470000</div>' in page
    assert "1.235000" in page and "1235000" not in page and "1778400000" not in page and ">2470000<" not in page
    assert "1778.400000" in operator_client.get("/admin/billing/package/").content.decode()
    invoice = Invoice.objects.create(organization=org, period=date(2025, 1, 1), amount_due=382_160_001)
    page = operator_client.get(f"/admin/billing/invoice/{invoice.pk}/change/").content.decode()
    assert '<div class="readonly">382.160001</div>' in page and "382160001" not in page
    assert "382.160001" in operator_client.get("/admin/billing/invoice/").content.decode()
    proposal = SponsorshipProposal.objects.create(organization=org, title="Climate", abstract="Models",
                                                  accelerator="h100-sxm-80g", card_hours=5, state="approved",
                                                  granted_amount=9_500_000)
    page = operator_client.get(f"/admin/billing/sponsorshipproposal/{proposal.pk}/change/").content.decode()
    assert '<div class="readonly">9.500000</div>' in page and "9500000" not in page
    write_off = _write_off(org)
    page = operator_client.get(f"/admin/billing/writeoff/{write_off.pk}/change/").content.decode()
    assert "write-off 0.031666 CNY" in page and "31666 µCNY" not in page
