"""Sponsorship grants (once, at list price, audited) and postpaid spending down to the credit limit."""
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.choices import AccountKind, TransferCode
from billing.credits import cash_credit, credit_limit_set
from billing.funds import balances_of, spend
from billing.models import Transfer
from billing.models_products import Invoice, InvoiceState, SponsorshipProposal, SponsorshipState
from billing.products.postpaid import (
    invoice_issue,
    invoice_outstanding,
    invoice_pay,
    invoice_pay_amount,
    invoice_settle,
    invoices_settle_due,
)
from billing.products.sponsorship import sponsorship_approve, sponsorship_reject, sponsorship_submit
from core.errors import InvalidState, ValidationFailed
from inventory.selectors import current_price
from tenancy.models import AuditEvent
from tests.factories.billing import fund
from tests.factories.billing_products import posted_at
from tests.factories.inventory import accelerator
from tests.factories.tenancy import OrganizationFactory, UserFactory
from tests.races import assert_organization_not_row_locked

pytestmark = pytest.mark.django_db


def _proposal(org, hours=10):
    accelerator("h100-sxm-80g")
    return sponsorship_submit(org=org, title="Protein folding", abstract="We fold proteins.",
                              accelerator="h100-sxm-80g", card_hours=hours)


def test_approve_twice_grants_once_at_list_price():
    org, staff = OrganizationFactory(), UserFactory(is_staff=True)
    proposal = _proposal(org, hours=10)
    price, _ = current_price("h100-sxm-80g")
    with CaptureQueriesContext(connection) as queries:
        sponsorship_approve(proposal_id=proposal.pk, actor=staff, note="Good science")
    assert_organization_not_row_locked(queries)
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


def test_submit_refuses_an_accelerator_without_a_price():
    """Approval grants at list price: a proposal for an unpriced accelerator (mtt-s4000) could never be approved."""
    org = OrganizationFactory()
    accelerator("mtt-s4000")
    with pytest.raises(ValidationFailed) as exc:
        sponsorship_submit(org=org, title="t", abstract="a", accelerator="mtt-s4000", card_hours=10)
    assert set(exc.value.details) == {"accelerator"} and "no price" in exc.value.details["accelerator"][0]
    assert not SponsorshipProposal.objects.exists()


def _postpaid(limit=1_000_000_000):
    org = OrganizationFactory()
    credit_limit_set(org=org, credit_limit=limit)
    return org


def _spend(org, amount, when, key):
    with posted_at(when):
        assert spend(org=org, amount=amount, key=key, code=TransferCode.METER) == 0


def _top_up(org, amount, key, when=None):
    """Cash paid in (as a credited top-up leaves it), at `when` or now."""
    if when is None:
        return cash_credit(org=org, amount=amount, key=key, code=TransferCode.TOPUP)
    with posted_at(when):
        return cash_credit(org=org, amount=amount, key=key, code=TransferCode.TOPUP)


def _open_asks(org) -> int:
    return sum(invoice_outstanding(i) for i in Invoice.objects.filter(organization=org, state=InvoiceState.OPEN))


def test_a_newer_invoice_supersedes_the_unpaid_older_one_so_debt_is_asked_once():
    """January unpaid: February's invoice (all debt at its end) replaces it instead of adding to it."""
    org = _postpaid()
    tz = ZoneInfo("Asia/Shanghai")
    _spend(org, 100_000_000, datetime(2025, 1, 15, tzinfo=tz), "jan")
    jan = invoice_issue(org=org, year=2025, month=1)
    assert (jan.amount_due, jan.state, invoice_outstanding(jan)) == (100_000_000, InvoiceState.OPEN, 100_000_000)
    _spend(org, 50_000_000, datetime(2025, 2, 15, tzinfo=tz), "feb")
    feb = invoice_issue(org=org, year=2025, month=2)
    jan.refresh_from_db()
    assert jan.state == InvoiceState.SUPERSEDED and feb.state == InvoiceState.OPEN
    assert feb.amount_due == 150_000_000 == _open_asks(org) == -balances_of(org)[AccountKind.CASH]
    assert invoice_pay_amount(jan) == 0 and invoice_pay_amount(feb) == 150_000_000
    with pytest.raises(InvalidState, match="later month"):
        invoice_pay(org=org, invoice_id=jan.pk)
    assert AuditEvent.objects.filter(action="invoice.supersede", target_id=str(jan.pk)).count() == 1
    assert invoice_issue(org=org, year=2025, month=2).pk == feb.pk  # issued once

    _top_up(org, 150_000_000, "pays-feb")
    assert invoices_settle_due(org_id=org.pk) == 1
    assert Invoice.objects.get(pk=feb.pk).state == InvoiceState.PAID
    assert Invoice.objects.get(pk=jan.pk).state == InvoiceState.SUPERSEDED
    assert balances_of(org)[AccountKind.CASH] == 0 and not Transfer.objects.filter(code=TransferCode.ROUNDING)


def test_what_is_left_to_pay_counts_what_was_paid_in_since_the_month_ended():
    """Payments repay the oldest debt first: a part paid by an ordinary top-up is not asked again, neither on
    the open invoice nor on the next one; the sub-fen rounding is posted once, when it is paid."""
    org = _postpaid()
    tz = ZoneInfo("Asia/Shanghai")
    _spend(org, 100_000_001, datetime(2025, 1, 15, tzinfo=tz), "jan")
    jan = invoice_issue(org=org, year=2025, month=1)
    _top_up(org, 80_000_000, "feb-topup", when=datetime(2025, 2, 10, tzinfo=tz))
    _spend(org, 50_000_000, datetime(2025, 2, 15, tzinfo=tz), "feb")
    # Owed now: 70.000001 CNY; January asks only its unpaid 20.000001 (no more than is owed).
    assert invoice_outstanding(jan) == 20_000_001 and invoice_pay_amount(jan) == 20_010_000
    assert invoices_settle_due(org_id=org.pk) == 0
    feb = invoice_issue(org=org, year=2025, month=2)
    assert feb.amount_due == 70_000_001 == invoice_outstanding(feb) == _open_asks(org)
    assert Invoice.objects.get(pk=jan.pk).state == InvoiceState.SUPERSEDED

    # February's debt paid right after the month ended, before its invoice was issued: not asked again.
    _spend(org, 30_000_000, datetime(2025, 3, 5, tzinfo=tz), "mar")
    _top_up(org, 70_010_000, "pays-feb", when=datetime(2025, 3, 10, tzinfo=tz))
    assert invoice_outstanding(Invoice.objects.get(pk=feb.pk)) == 0
    with posted_at(datetime(2025, 3, 10, 0, 1, tzinfo=tz)):  # the settle follows the credit at once
        assert invoices_settle_due(org_id=org.pk) == 1 and invoices_settle_due(org_id=org.pk) == 0
    rounding = list(Transfer.objects.filter(code=TransferCode.ROUNDING).values_list("key", "amount"))
    assert rounding == [(f"invoice_rounding:{feb.pk}", 9_999)]  # 70.01 − 70.000001, once
    assert balances_of(org)[AccountKind.CASH] == -30_000_000  # exactly March's use is left
    mar = invoice_issue(org=org, year=2025, month=3)
    assert (mar.amount_due, invoice_outstanding(mar), mar.state) == (30_000_000, 30_000_000, InvoiceState.OPEN)
    assert Invoice.objects.get(pk=feb.pk).state == InvoiceState.PAID  # a paid invoice is never superseded


def test_an_invoice_issued_after_its_debt_was_repaid_is_paid_at_once():
    org = _postpaid()
    tz = ZoneInfo("Asia/Shanghai")
    _spend(org, 12_345_678, datetime(2025, 5, 20, tzinfo=tz), "may")
    _top_up(org, 12_350_000, "june-payment", when=datetime(2025, 6, 2, tzinfo=tz))
    may = invoice_issue(org=org, year=2025, month=5)
    assert may.amount_due == 12_345_678 and may.state == InvoiceState.PAID and may.paid_at is not None
    assert Transfer.objects.get(code=TransferCode.ROUNDING).amount == 4_322
    assert balances_of(org)[AccountKind.CASH] == 0


def test_issuing_an_unrepresentable_or_unfinished_month_is_a_validation_error():
    org = _postpaid()
    for year, month in ((9999, 12), (9999, 11), (2025, 13)):
        with pytest.raises(ValidationFailed):
            invoice_issue(org=org, year=year, month=month)
    assert not Invoice.objects.exists()


def test_a_month_invoiced_after_a_later_one_is_superseded_at_once():
    """Issued late (after December's), November's debt is already in December's invoice: never open."""
    org = _postpaid()
    _spend(org, 10_000_000, datetime(2024, 11, 15, tzinfo=ZoneInfo("Asia/Shanghai")), "nov")
    dec = invoice_issue(org=org, year=2024, month=12)
    nov = invoice_issue(org=org, year=2024, month=11)
    assert (nov.amount_due, nov.state, invoice_pay_amount(nov)) == (10_000_000, InvoiceState.SUPERSEDED, 0)
    assert (dec.amount_due, dec.state) == (10_000_000, InvoiceState.OPEN)
    assert _open_asks(org) == 10_000_000
