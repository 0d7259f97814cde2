"""Reads of the billing products, always scoped to one organization (another tenant's id → 404)."""
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import BigIntegerField, Case, DateTimeField, Func, OuterRef, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce
from django.utils.translation import gettext

from core.errors import NotFoundError

from ..choices import PLATFORM_IDS, AccountKind
from ..models import Account, Transfer
from ..models_products import Invoice, InvoiceState, Package, SponsorshipProposal


def sponsorship_list(*, org):
    """The organization's proposals, newest first (one query per page)."""
    return SponsorshipProposal.objects.filter(organization=org).order_by("-created_at", "-id")


def sponsorship_get(*, org, id) -> SponsorshipProposal:
    """One of the organization's proposals, or NotFoundError."""
    try:
        proposal = SponsorshipProposal.objects.filter(organization=org, pk=id).first()
    except (ValidationError, ValueError):
        proposal = None
    if proposal is None:
        raise NotFoundError(gettext("Proposal not found."))
    return proposal


def invoice_list(*, org):
    """The organization's invoices, newest month first; each open one carries `paid_since_end`
    (see cash_paid_since), so a page's amounts left to pay cost no query per row."""
    invoices = Invoice.objects.filter(organization=org).order_by("-period", "-id")
    at = _MonthAfter(OuterRef("period"), Value(settings.BILLING_TIME_ZONE))
    return invoices.annotate(paid_since_end=Case(
        When(state=InvoiceState.OPEN, then=_paid_since(OuterRef("organization_id"), at)), default=None,
        output_field=BigIntegerField()))


class _MonthAfter(Func):
    """The first instant after the month that starts on a date column, in a named time zone."""

    output_field = DateTimeField()

    def as_sql(self, compiler, connection, **extra_context):
        period, period_params = compiler.compile(self.source_expressions[0])
        tz, tz_params = compiler.compile(self.source_expressions[1])
        return f"(({period} + interval '1 month')::timestamp AT TIME ZONE {tz})", (*period_params, *tz_params)


def _paid_since(org, at):
    """Cash credited to `org` at or after `at`, less rounding legs taken from it since (µCNY), as an expression.

    Both scan few rows: credits to cash are top-ups and adjustments (meter ticks are debits), and rounding
    legs go to one platform account (one per paid invoice)."""
    credited = (Transfer.objects.filter(credit_account__organization_id=org, credit_account__kind=AccountKind.CASH,
                                        created_at__gte=at).order_by().values("credit_account_id")
                .annotate(s=Sum("amount")).values("s"))
    rounded = (Transfer.objects.filter(credit_account_id=PLATFORM_IDS[AccountKind.ROUNDING],
                                       debit_account__organization_id=org, debit_account__kind=AccountKind.CASH,
                                       created_at__gte=at).order_by().values("debit_account_id")
               .annotate(s=Sum("amount")).values("s"))
    return (Coalesce(Subquery(credited, output_field=BigIntegerField()), Value(0))
            - Coalesce(Subquery(rounded, output_field=BigIntegerField()), Value(0)))


def cash_paid_since(*, org_id, at) -> int:
    """What the organization paid into cash at or after `at`: credits to cash less the rounding legs taken from
    it since (µCNY, one query). Payments repay the oldest debt first, so this is what repaid a month's debt."""
    value = (Account.objects.filter(organization_id=org_id, kind=AccountKind.CASH)
             .annotate(p=_paid_since(org_id, at)).values_list("p", flat=True).first())
    return int(value or 0)


def package_list(*, org):
    """The organization's package periods, newest first."""
    return Package.objects.filter(organization=org).order_by("-starts_at", "-period", "-id")


def invoice_get(*, org, id) -> Invoice:
    """One of the organization's invoices, or NotFoundError."""
    try:
        invoice = Invoice.objects.filter(organization=org, pk=id).first()
    except (ValidationError, ValueError):
        invoice = None
    if invoice is None:
        raise NotFoundError(gettext("Invoice not found."))
    return invoice
