"""Postpaid (SPEC §4): operators set a credit limit (BillingProfile.credit_limit, ledger's admin, audited);
a monthly invoice shows what cash was below zero at the month's end; paying it is a top-up in fen and
the sub-fen difference is posted once between cash and `rounding` (`invoice_rounding:<invoice id>`)."""
from datetime import date

from django.conf import settings
from django.db import transaction

from core.dbclock import db_now
from core.errors import InvalidState, ValidationFailed
from core.money import format_ucny
from tenancy.audit import audit_record

from ..choices import AccountKind, TransferCode
from ..ledger import Leg, leg_post, org_account_ids, platform_id
from ..models import Account, BillingProfile
from ..models_payments import UCNY_PER_FEN, TopUp
from ..models_products import Invoice, InvoiceState
from .selectors import invoice_get
from .statements import _sums_before, billing_tz, month_bounds


def invoice_due_in_fen(invoice: Invoice) -> int:
    """The amount due rounded UP to the fen (µCNY, a whole number of fen): what settles the invoice."""
    return -(-invoice.amount_due // UCNY_PER_FEN) * UCNY_PER_FEN


def invoice_pay_amount(invoice: Invoice) -> int:
    """What paying the invoice charges: its amount in fen, at least the smallest top-up (TOPUP_MIN_UCNY);
    what a small invoice's payment brings beyond the amount due stays on the balance as cash."""
    return max(invoice_due_in_fen(invoice), settings.TOPUP_MIN_UCNY)


def cash_at(*, org_id, at) -> int:
    """The organization's cash balance from transfers created before `at` (µCNY)."""
    cash = Account.objects.filter(organization_id=org_id, kind=AccountKind.CASH).values_list("pk", flat=True).first()
    return _sums_before([cash], at).get(cash, 0) if cash else 0


def invoice_issue(*, org, year: int, month: int) -> Invoice:
    """The organization's invoice for a finished month (created once; amount due = −cash at its end, ≥ 0)."""
    org_id = getattr(org, "pk", org)
    start, end = month_bounds(year, month)
    if end > db_now():
        raise ValidationFailed("A month is invoiced after it ends.", details={"month": ["The month has not ended."]})
    period = date(year, month, 1)
    existing = Invoice.objects.filter(organization_id=org_id, period=period).first()
    if existing is not None:
        return existing
    due = max(0, -cash_at(org_id=org_id, at=end))
    with transaction.atomic():
        invoice, created = Invoice.objects.get_or_create(
            organization_id=org_id, period=period,
            defaults={"amount_due": due, "state": InvoiceState.OPEN if due else InvoiceState.PAID,
                      "paid_at": None if due else db_now()})
        if created:
            audit_record(action="invoice.issue", org=invoice.organization, target=invoice,
                         details={"period": f"{period:%Y-%m}", "amount_due": due})
    return invoice


def invoices_issue_due() -> int:
    """Issue last month's invoice of every postpaid organization (credit limit > 0) that lacks one."""
    now = db_now().astimezone(billing_tz())
    year, month = (now.year, now.month - 1) if now.month > 1 else (now.year - 1, 12)
    period = date(year, month, 1)
    orgs = list(BillingProfile.objects.filter(credit_limit__gt=0).exclude(
        organization__invoices__period=period).order_by("pk").values_list("organization_id", flat=True))
    for org_id in orgs:
        invoice_issue(org=org_id, year=year, month=month)
    return len(orgs)


def invoice_pay(*, org, invoice_id, actor=None, request=None) -> TopUp:
    """Start paying an open invoice: a top-up of invoice_pay_amount (a Stripe PaymentIntent)."""
    from ..payments.services import topup_create

    invoice = invoice_get(org=org, id=invoice_id)
    if invoice.state != InvoiceState.OPEN:
        raise InvalidState("This invoice is already paid.")
    if invoice_pay_amount(invoice) > settings.TOPUP_MAX_UCNY:
        raise ValidationFailed(
            "This invoice is above the largest card payment; pay it by bank transfer (an operator records it).",
            details={"amount_due": [f"Card payments go up to {format_ucny(settings.TOPUP_MAX_UCNY)} CNY."]})
    topup = topup_create(org=org, actor=actor, amount=invoice_pay_amount(invoice), request=request)
    with transaction.atomic():
        updated = Invoice.objects.filter(pk=invoice.pk, state=InvoiceState.OPEN).update(topup_id=topup.pk)
        if updated:
            audit_record(action="invoice.pay", org=org, actor=actor, target=invoice, request=request,
                         details={"topup": str(topup.pk), "amount": invoice_pay_amount(invoice)})
    return topup


def invoice_settle(*, invoice_id) -> Invoice:
    """Mark an open invoice paid when its top-up was credited (posting the sub-fen rounding once),
    or when the organization's cash is back at or above zero (paid by ordinary top-ups)."""
    with transaction.atomic():
        invoice = Invoice.objects.select_for_update().get(pk=invoice_id)
        if invoice.state != InvoiceState.OPEN:
            return invoice
        topup = TopUp.objects.filter(pk=invoice.topup_id, credited_at__isnull=False).first() if invoice.topup_id else None
        if topup is not None:
            diff = invoice_due_in_fen(invoice) - invoice.amount_due
            if diff > 0:
                ids = org_account_ids([invoice.organization_id])[invoice.organization_id]
                leg_post(Leg(key=f"invoice_rounding:{invoice.pk}", debit_id=ids[AccountKind.CASH],
                             credit_id=platform_id(AccountKind.ROUNDING), amount=diff, code=TransferCode.ROUNDING,
                             payment_ref=str(topup.pk)))
        elif Account.objects.filter(organization_id=invoice.organization_id, kind=AccountKind.CASH,
                                    balance__lt=0).exists():
            return invoice  # still owed, and no paying top-up has landed yet
        invoice.state = InvoiceState.PAID
        invoice.paid_at = db_now()
        invoice.save(update_fields=["state", "paid_at"])
        audit_record(action="invoice.paid", org=invoice.organization, target=invoice,
                     details={"topup": str(topup.pk) if topup else None})
        return invoice


def invoices_settle_due(*, limit: int = 1000, org_id=None) -> int:
    """Settle every open invoice (of one organization, when given) that can be settled now; returns how many
    became paid."""
    paid = 0
    open_invoices = Invoice.objects.filter(state=InvoiceState.OPEN)
    if org_id is not None:
        open_invoices = open_invoices.filter(organization_id=org_id)
    for pk in open_invoices.order_by("period", "pk").values_list("pk", flat=True)[:limit]:
        if invoice_settle(invoice_id=pk).state == InvoiceState.PAID:
            paid += 1
    return paid
