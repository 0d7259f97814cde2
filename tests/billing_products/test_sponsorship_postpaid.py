"""Sponsorship grants (once, at list price, audited) and postpaid spending down to the credit limit."""
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from billing.choices import AccountKind, TransferCode
from billing.credits import credit_limit_set
from billing.funds import balances_of, spend
from billing.models import Transfer
from billing.models_products import Invoice, InvoiceState, SponsorshipState
from billing.products.postpaid import invoice_issue, invoice_pay_amount, invoice_settle
from billing.products.sponsorship import sponsorship_approve, sponsorship_reject, sponsorship_submit
from core.errors import InvalidState, ValidationFailed
from inventory.selectors import current_price
from tenancy.models import AuditEvent
from tests.factories.billing import fund
from tests.factories.billing_products import posted_at
from tests.factories.inventory import accelerator
from tests.factories.tenancy import OrganizationFactory, UserFactory

pytestmark = [pytest.mark.pg, pytest.mark.django_db]


def _proposal(org, hours=10):
    accelerator("h100-sxm-80g")
    return sponsorship_submit(org=org, title="Protein folding", abstract="We fold proteins.",
                              accelerator="h100-sxm-80g", card_hours=hours)


def test_approve_twice_grants_once_at_list_price():
    org, staff = OrganizationFactory(), UserFactory(is_staff=True)
    proposal = _proposal(org, hours=10)
    price, _ = current_price("h100-sxm-80g")
    sponsorship_approve(proposal_id=proposal.pk, actor=staff, note="Good science")
    again = sponsorship_approve(proposal_id=proposal.pk, actor=staff, note="again")
    transfers = list(Transfer.objects.filter(code=TransferCode.GRANT))
    assert len(transfers) == 1 and transfers[0].key == f"grant:{proposal.pk}" and transfers[0].amount == 10 * price
    assert balances_of(org)[AccountKind.GRANT] == 10 * price
    assert again.state == SponsorshipState.APPROVED and again.staff_note == "Good science"
    assert again.granted_amount == 10 * price and again.decided_by == staff
    assert AuditEvent.objects.filter(action="sponsorship.approve", target_id=str(proposal.pk)).count() == 1
    with pytest.raises(InvalidState):
        sponsorship_reject(proposal_id=proposal.pk, actor=staff)


def test_rejected_proposal_grants_nothing():
    org = OrganizationFactory()
    proposal = _proposal(org)
    sponsorship_reject(proposal_id=proposal.pk, note="Out of scope")
    with pytest.raises(InvalidState):
        sponsorship_approve(proposal_id=proposal.pk)
    assert not Transfer.objects.filter(code=TransferCode.GRANT).exists()
    proposal.refresh_from_db()
    assert proposal.state == SponsorshipState.REJECTED and proposal.staff_note == "Out of scope"


def test_submit_validates():
    org = OrganizationFactory()
    with pytest.raises(ValidationFailed) as exc:
        sponsorship_submit(org=org, title="", abstract="x", accelerator="no-such", card_hours=0)
    assert set(exc.value.details) == {"title", "accelerator", "card_hours"}


def test_postpaid_spends_down_to_the_limit_and_no_further():
    org = OrganizationFactory()
    credit_limit_set(org=org, credit_limit=50_000_000)
    fund(org, 10_000_000)
    assert spend(org=org, amount=40_000_000, key="use:1", code=TransferCode.METER) == 0
    assert balances_of(org)[AccountKind.CASH] == -30_000_000
    # 20 CNY of room left: a 25 CNY spend charges 20 and reports 5 uncharged.
    assert spend(org=org, amount=25_000_000, key="use:2", code=TransferCode.METER) == 5_000_000
    assert balances_of(org)[AccountKind.CASH] == -50_000_000
    assert spend(org=org, amount=1, key="use:3", code=TransferCode.METER) == 1
    assert balances_of(org)[AccountKind.CASH] == -50_000_000
    assert AuditEvent.objects.filter(action="billing.credit_limit_set").count() == 1


def test_invoice_shows_cash_below_zero_at_month_end_and_settles_with_rounding():
    org = OrganizationFactory()
    credit_limit_set(org=org, credit_limit=50_000_000)
    tz = ZoneInfo("Asia/Shanghai")
    with posted_at(datetime(2025, 3, 31, 23, 0, tzinfo=tz)):
        spend(org=org, amount=12_345_678, key="march", code=TransferCode.METER)
    with posted_at(datetime(2025, 4, 1, 0, 30, tzinfo=tz)):  # April in Shanghai: not on March's invoice
        spend(org=org, amount=1_000_000, key="april", code=TransferCode.METER)
    invoice = invoice_issue(org=org, year=2025, month=3)
    assert invoice.amount_due == 12_345_678 and invoice.state == InvoiceState.OPEN
    assert invoice_issue(org=org, year=2025, month=3).pk == invoice.pk
    assert invoice_pay_amount(invoice) == 12_350_000
    # The paying top-up lands (as the webhook would: a TopUp credited, cash credited in fen).
    from django.utils import timezone

    from billing.models_payments import TopUp

    topup = TopUp.objects.create(organization=org, amount=12_350_000, amount_fen=1235, credited_at=timezone.now())
    Invoice.objects.filter(pk=invoice.pk).update(topup_id=topup.pk)
    fund(org, 12_350_000, key=f"stripe_pi:test-{topup.pk}")
    invoice_settle(invoice_id=invoice.pk)
    invoice_settle(invoice_id=invoice.pk)
    invoice.refresh_from_db()
    assert invoice.state == InvoiceState.PAID
    rounding = list(Transfer.objects.filter(code=TransferCode.ROUNDING))
    assert [(t.key, t.amount) for t in rounding] == [(f"invoice_rounding:{invoice.pk}", 4_322)]
    assert balances_of(org)[AccountKind.CASH] == -1_000_000  # March paid exactly; April's use remains
