"""Reads for fapiao, always scoped to one organization (another tenant's id → 404), and what it may still invoice."""
from django.core.exceptions import ValidationError
from django.db.models import F, Sum
from django.db.models.functions import Greatest
from django.utils.translation import gettext

from core.errors import NotFoundError

from ..models_fapiao import COUNTED_STATES, FapiaoRequest
from ..models_payments import UCNY_PER_FEN, TopUp


def fapiao_list(*, org):
    """The organization's fapiao requests, newest first (without the PDF bytes)."""
    return FapiaoRequest.objects.filter(organization=org).defer("pdf").order_by("-created_at", "-id")


def fapiao_get(*, org, id, with_pdf: bool = False) -> FapiaoRequest:
    """One of the organization's fapiao requests, or NotFoundError."""
    rows = FapiaoRequest.objects.filter(organization=org)
    try:
        fapiao = (rows if with_pdf else rows.defer("pdf")).filter(pk=id).first()
    except (ValidationError, ValueError):
        fapiao = None
    if fapiao is None:
        raise NotFoundError(gettext("Fapiao request not found."))
    return fapiao


def invoiceable(*, org, states=COUNTED_STATES) -> dict:
    """µCNY paid (captured top-ups, invoices paid through them included), refunded (applied or asked for),
    invoiced (fapiao in `states`, net of red-letter reversals) and what is left to invoice (negative when refunds
    went past what was invoiced)."""
    paid = TopUp.objects.filter(organization=org, credited_at__isnull=False).aggregate(
        paid=Sum("amount_received_fen"), refunded=Sum(Greatest(F("refunded_fen"), F("refund_requested_fen"))))
    invoiced = FapiaoRequest.objects.filter(organization=org, state__in=states).aggregate(
        total=Sum(F("amount") - F("red_letter_amount")))["total"] or 0
    paid_ucny = (paid["paid"] or 0) * UCNY_PER_FEN
    refunded_ucny = (paid["refunded"] or 0) * UCNY_PER_FEN
    return {"paid": paid_ucny, "refunded": refunded_ucny, "invoiced": invoiced,
            "available": paid_ucny - refunded_ucny - invoiced}
