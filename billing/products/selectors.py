"""Reads of the billing products, always scoped to one organization (another tenant's id → 404)."""
from django.core.exceptions import ValidationError

from core.errors import NotFoundError

from ..models_products import Invoice, Package, SponsorshipProposal


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
        raise NotFoundError("Proposal not found.")
    return proposal


def invoice_list(*, org):
    """The organization's invoices, newest month first."""
    return Invoice.objects.filter(organization=org).order_by("-period", "-id")


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
        raise NotFoundError("Invoice not found.")
    return invoice
