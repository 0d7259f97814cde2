"""Reads for top-ups, always scoped to one organization (another tenant's id → 404)."""
from django.core.exceptions import ValidationError
from django.utils.translation import gettext

from billing.choices import AccountKind
from billing.models import Account
from billing.models_payments import TopUp
from core.errors import NotFoundError


def topup_list(*, org):
    """The organization's top-ups, newest first."""
    return TopUp.objects.filter(organization=org).order_by("-created_at", "-id")


def topup_get(*, org, id) -> TopUp:
    """One of the organization's top-ups, or NotFoundError."""
    try:
        topup = TopUp.objects.filter(organization=org, pk=id).first()
    except (ValidationError, ValueError):
        topup = None
    if topup is None:
        raise NotFoundError(gettext("Top-up not found."))
    return topup


def cash_balance(*, org) -> int:
    """The organization's cash balance in µCNY (0 before its first transfer)."""
    value = Account.objects.filter(organization=org, kind=AccountKind.CASH).values_list("balance", flat=True).first()
    return int(value or 0)
