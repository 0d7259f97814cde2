"""Postpaid (SPEC §4): operators set a credit limit (BillingProfile.credit_limit, ledger's admin, audited);
a monthly invoice shows what cash was below zero at the month's end; paying it is a top-up in fen and
the sub-fen difference is posted once between cash and `rounding` (`invoice_rounding:<invoice id>`).

A month's invoice covers all debt so far, so it supersedes the organization's older open invoices: at most
one invoice is open, and open invoices never ask for more than is owed. Payments repay the oldest debt
first: what is left to pay on an invoice is its amount due less the cash paid in since its month ended
(selectors.cash_paid_since), whether through the invoice, an ordinary top-up or a superseded invoice's payment.
"""
from datetime import date, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import InvalidState, ValidationFailed
from core.locks import advisory_unlock, try_advisory_lock
from core.money import format_ucny
from tenancy.audit import audit_record

from ..choices import AccountKind, TransferCode
from ..ledger import Leg, leg_post, org_account_ids, platform_id
from ..models import Account, BillingProfile
from ..models_payments import UCNY_PER_FEN, TopUp, TopUpState
from ..models_products import Invoice, InvoiceState
from .selectors import cash_paid_since, invoice_get
from .statements import _sums_before, billing_tz, month_bounds


def _ceil_fen(amount: int) -> int:
    return -(-amount // UCNY_PER_FEN) * UCNY_PER_FEN


def period_end(period: date) -> datetime:
    """The first instant after the invoice's month, in the billing time zone."""
    return month_bounds(period.year, period.month)[1]


def invoice_outstanding(invoice: Invoice) -> int:
    """µCNY left to pay on an open invoice (0 for a paid or superseded one): its amount due less what was paid
    into cash since its month ended. invoice_list's `paid_since_end` saves the query."""
    if invoice.state != InvoiceState.OPEN:
        return 0
    paid = getattr(invoice, "paid_since_end", None)
    if paid is None:
        paid = invoice.paid_since_end = cash_paid_since(org_id=invoice.organization_id,
                                                        at=period_end(invoice.period))
    return max(0, invoice.amount_due - paid)


def invoice_due_in_fen(invoice: Invoice) -> int:
    """What is left to pay rounded UP to the fen (µCNY, a whole number of fen)."""
    return _ceil_fen(invoice_outstanding(invoice))


def invoice_pay_amount(invoice: Invoice) -> int:
    """What paying an open invoice charges (0 for others): what is left in fen, at least the smallest top-up
    (TOPUP_MIN_UCNY); what a small payment brings beyond it stays on the balance as cash."""
    if invoice.state != InvoiceState.OPEN:
        return 0
    return max(invoice_due_in_fen(invoice), settings.TOPUP_MIN_UCNY)


def cash_at(*, org_id, at) -> int:
    """The organization's cash balance from transfers created before `at` (µCNY)."""
    cash = Account.objects.filter(organization_id=org_id, kind=AccountKind.CASH).values_list("pk", flat=True).first()
    return _sums_before([cash], at).get(cash, 0) if cash else 0


def invoice_issue(*, org, year: int, month: int) -> Invoice:
    """The organization's invoice for a finished month (created once; amount due = −cash at its end, ≥ 0).

    Older open invoices are settled if repaid, and the rest superseded: their debt is in this amount too."""
    org_id = getattr(org, "pk", org)
    start, end = month_bounds(year, month)
    if end > db_now():
        raise ValidationFailed(gettext("A month is invoiced after it ends."), details={"month": [gettext("The month has not ended.")]})
    period = date(year, month, 1)
    existing = Invoice.objects.filter(organization_id=org_id, period=period).first()
    if existing is not None:
        return existing
    due = max(0, -cash_at(org_id=org_id, at=end))
    with transaction.atomic():
        # Locked in pk order (invoice_settle locks one at a time): a concurrent settle of an older invoice either
        # commits first (paid) or then finds it superseded; its payment counts for this invoice either way.
        older = list(Invoice.objects.select_for_update().filter(
            organization_id=org_id, period__lt=period, state=InvoiceState.OPEN).order_by("pk"))
        still_open = [inv for inv in older if not _settle_locked(inv)]
        if not due:
            state = InvoiceState.PAID
        elif Invoice.objects.filter(organization_id=org_id, period__gt=period).exists():
            state = InvoiceState.SUPERSEDED  # issued late: a newer invoice already includes this debt
        else:
            state = InvoiceState.OPEN
        invoice, created = Invoice.objects.get_or_create(
            organization_id=org_id, period=period,
            defaults={"amount_due": due, "state": state, "paid_at": db_now() if state == InvoiceState.PAID else None})
        if created:
            audit_record(action="invoice.issue", org=invoice.organization, target=invoice,
                         details={"period": f"{period:%Y-%m}", "amount_due": due, "state": state})
            _settle_locked(invoice)  # repaid between the month's end and now (our insert holds its row lock)
            for old in still_open:
                old.state = InvoiceState.SUPERSEDED
                old.save(update_fields=["state"])
                audit_record(action="invoice.supersede", org=invoice.organization, target=old,
                             details={"period": f"{old.period:%Y-%m}", "by": str(invoice.pk),
                                      "by_period": f"{period:%Y-%m}"})
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


PAYABLE = (TopUpState.CREATED, TopUpState.FAILED)  # the customer can still confirm it (a failed one with another card)
# A top-up row without its PaymentIntent yet is being started for as long as the request that made it holds the
# row's session advisory lock: that request takes it in the transaction that commits the row, so the
# row is never seen without it, and keeps it until its Stripe call has returned. The server drops the lock with
# a dead request's connection, so the next Pay takes the same row over at once: same amount, same Stripe
# idempotency key (`cardmix-topup-<id>`), so if the dead request had reached Stripe the same PaymentIntent comes
# back, and nobody can be asked to pay twice. A row is left alone for INVOICE_PAY_TAKEOVER_GRACE_SECONDS anyway
# (a request of a version without the lock, during a rolling deploy).
INVOICE_PAY_TAKEOVER_GRACE_SECONDS = 5


def _starting_lock_name(topup_id) -> str:
    return f"invoice_pay.starting:{topup_id}"


def _starting_lock_take(topup_id, held: list) -> bool:
    """Take the session lock that marks this top-up as being started by us (False if a live request holds it)."""
    name = _starting_lock_name(topup_id)
    if not try_advisory_lock(name):
        return False
    held.append(name)
    return True


def _starter_gone(topup: TopUp, held: list) -> bool:
    """Whether the request that made this top-up row (still without its PaymentIntent) is gone, so this one
    takes it over; we then hold the row's lock (in `held`)."""
    # created_at is the app server's clock (auto_now_add): compare it with the same clock
    age = timezone.now() - topup.created_at
    return age > timedelta(seconds=INVOICE_PAY_TAKEOVER_GRACE_SECONDS) and _starting_lock_take(topup.pk, held)


def invoice_pay(*, org, invoice_id, actor=None, request=None) -> TopUp:
    """Start paying an open invoice: a top-up of invoice_pay_amount (a Stripe PaymentIntent).

    The invoice's pending top-up of that amount is returned again rather than a second one created, so two
    clicks never make two payments the customer could both complete. Which request makes the top-up is decided
    under the invoice's row lock, and its row is committed as the invoice's before Stripe is called (no lock is
    held across the network): a simultaneous Pay finds it and answers 409 until its PaymentIntent is there. A
    row whose request died before storing its PaymentIntent is taken over by the next Pay (see above)."""
    from ..payments.services import topup_intent_create, topup_row_create

    invoice = invoice_get(org=org, id=invoice_id)
    held: list[str] = []  # session locks this request holds: released however it ends
    try:
        with transaction.atomic():
            invoice = Invoice.objects.select_for_update().get(pk=invoice.pk)
            if invoice.state == InvoiceState.SUPERSEDED:
                raise InvalidState(gettext("This invoice is included in a later month's invoice; pay that one."))
            if invoice.state != InvoiceState.OPEN:
                raise InvalidState(gettext("This invoice is already paid."))
            amount = invoice_pay_amount(invoice)
            if amount > settings.TOPUP_MAX_UCNY:
                raise ValidationFailed(
                    gettext("This invoice is above the largest card payment; pay it by bank transfer (an operator records it)."),
                    details={"amount_due": [gettext('Card payments go up to %(format_ucny)s CNY.') % {'format_ucny': format_ucny(settings.TOPUP_MAX_UCNY)}]})
            current = (TopUp.objects.filter(pk=invoice.topup_id, organization_id=invoice.organization_id,
                                            credited_at__isnull=True).first() if invoice.topup_id else None)
            if current is not None and current.state == TopUpState.PROCESSING:
                raise InvalidState(gettext("A payment of this invoice is being processed."))
            topup = None
            if current is not None and current.state == TopUpState.CREATED and not current.stripe_payment_intent_id:
                if not _starter_gone(current, held):
                    raise InvalidState(gettext("A payment of this invoice is being started; retry in a moment."))
                if current.amount == amount:  # else nobody got its client secret: a new payment replaces it
                    topup = current
                    audit_record(action="invoice.pay", org=org, actor=actor, target=invoice, request=request,
                                 details={"topup": str(topup.pk), "amount": amount, "taken_over": True})
            elif (current is not None and current.state in PAYABLE and current.amount == amount
                    and current.stripe_payment_intent_id and current.client_secret):
                return current
            if topup is None:
                topup = topup_row_create(org=org, actor=actor, amount=amount, request=request)
                _starting_lock_take(topup.pk, held)  # before the row commits: nobody sees it unlocked
                invoice.topup_id = topup.pk
                invoice.save(update_fields=["topup_id"])
                audit_record(action="invoice.pay", org=org, actor=actor, target=invoice, request=request,
                             details={"topup": str(topup.pk), "amount": amount})
        return topup_intent_create(topup)
    finally:
        for name in held:
            advisory_unlock(name)


def _settle_locked(invoice: Invoice) -> bool:
    """Mark a locked open invoice paid once what was paid in since its month ended covers it (or cash is back
    at or above zero); returns whether it is paid. Payments come in whole fen: the sub-fen part of what was
    paid beyond the invoice goes to `rounding`, once, whichever top-up paid it (an earlier payment of the
    same invoice, or of one it superseded, counts as much as the latest)."""
    if invoice.state != InvoiceState.OPEN:
        return invoice.state == InvoiceState.PAID
    left = invoice.amount_due - cash_paid_since(org_id=invoice.organization_id, at=period_end(invoice.period))
    if left > 0 and Account.objects.filter(organization_id=invoice.organization_id, kind=AccountKind.CASH,
                                           balance__lt=0).exists():
        return False  # still owed
    topup = TopUp.objects.filter(pk=invoice.topup_id, credited_at__isnull=False).first() if invoice.topup_id else None
    diff = (-left) % UCNY_PER_FEN if left <= 0 else 0  # never more than the overpayment
    if diff:
        ids = org_account_ids([invoice.organization_id])[invoice.organization_id]
        leg_post(Leg(key=f"invoice_rounding:{invoice.pk}", debit_id=ids[AccountKind.CASH],
                     credit_id=platform_id(AccountKind.ROUNDING), amount=diff, code=TransferCode.ROUNDING,
                     payment_ref=str(topup.pk) if topup else ""))
    invoice.state = InvoiceState.PAID
    invoice.paid_at = db_now()
    invoice.save(update_fields=["state", "paid_at"])
    audit_record(action="invoice.paid", org=invoice.organization, target=invoice,
                 details={"topup": str(topup.pk) if topup else None, "rounding": diff})
    return True


def invoice_settle(*, invoice_id) -> Invoice:
    """Mark an open invoice paid when the cash paid in since its month ended covers it (its own top-up, other
    top-ups, or the payment of an invoice it superseded), posting the sub-fen rounding once."""
    with transaction.atomic():
        invoice = Invoice.objects.select_for_update().get(pk=invoice_id)
        _settle_locked(invoice)
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
