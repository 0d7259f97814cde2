"""Sponsorship proposals (SPEC §4): customers submit; operators approve (grant at list price, once) or reject."""
from django.db import transaction
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import InvalidState, NotFoundError, ValidationFailed
from inventory.models import Accelerator
from inventory.selectors import PriceMissing, current_price
from tenancy.audit import audit_record

from ..credits import grant_credit
from ..models_products import SponsorshipProposal, SponsorshipState

MAX_CARD_HOURS = 1_000_000


def sponsorship_submit(*, org, user=None, title: str, abstract: str, accelerator: str, card_hours: int,
                       request=None) -> SponsorshipProposal:
    """Record an organization's proposal for sponsored card-hours on one accelerator."""
    errors: dict = {}
    if not Accelerator.objects.filter(slug=accelerator).exists():
        errors["accelerator"] = [gettext("Unknown accelerator %(accelerator)s.") % {"accelerator": repr(accelerator)}]
    else:
        try:
            current_price(accelerator)  # approval grants at list price: an unpriced one could never be approved
        except PriceMissing:
            errors["accelerator"] = [gettext("%(accelerator)s has no price; it cannot be sponsored.") % {
                "accelerator": accelerator}]
    if not isinstance(card_hours, int) or isinstance(card_hours, bool) or not 0 < card_hours <= MAX_CARD_HOURS:
        errors["card_hours"] = [gettext("A whole number of card-hours between 1 and %(max)s.") % {"max": MAX_CARD_HOURS}]
    if not (title or "").strip():
        errors["title"] = [gettext("This field may not be blank.")]
    if not (abstract or "").strip():
        errors["abstract"] = [gettext("This field may not be blank.")]
    if errors:
        raise ValidationFailed(gettext("The proposal is incomplete."), details=errors)
    with transaction.atomic():
        proposal = SponsorshipProposal.objects.create(
            organization=org, submitted_by=user if getattr(user, "pk", None) else None, title=title.strip(),
            abstract=abstract.strip(), accelerator=accelerator, card_hours=card_hours)
        audit_record(action="sponsorship.submit", org=org, actor=proposal.submitted_by, target=proposal,
                     request=request, details={"accelerator": accelerator, "card_hours": card_hours})
    return proposal


def _lock(proposal_id) -> SponsorshipProposal:
    proposal = (SponsorshipProposal.objects.select_for_update(of=("self",)).select_related("organization")
                .filter(pk=proposal_id).first())
    if proposal is None:
        raise NotFoundError(gettext("Proposal not found."))
    return proposal


def sponsorship_approve(*, proposal_id, actor=None, note: str = "", request=None) -> SponsorshipProposal:
    """Approve: grant card_hours × the accelerator's current on-demand list price into `grant` once (`grant:<id>`).

    The row lock serialises two operators; approving an approved proposal changes nothing.
    """
    with transaction.atomic():
        proposal = _lock(proposal_id)
        if proposal.state == SponsorshipState.APPROVED:
            return proposal
        if proposal.state == SponsorshipState.REJECTED:
            raise InvalidState(gettext("This proposal was rejected; it cannot be approved."))
        on_demand, _monthly = current_price(proposal.accelerator)
        amount = proposal.card_hours * on_demand
        grant_credit(org=proposal.organization, amount=amount, key=f"grant:{proposal.pk}", grant_ref=str(proposal.pk),
                     actor=actor)
        proposal.state = SponsorshipState.APPROVED
        proposal.staff_note = note or proposal.staff_note
        proposal.decided_by = actor if getattr(actor, "pk", None) else None
        proposal.decided_at = db_now()
        proposal.granted_amount = amount
        proposal.save(update_fields=["state", "staff_note", "decided_by", "decided_at", "granted_amount"])
        audit_record(action="sponsorship.approve", org=proposal.organization, actor=proposal.decided_by,
                     target=proposal, request=request,
                     details={"amount": amount, "price_per_card_hour": on_demand, "card_hours": proposal.card_hours,
                              "note": note})
        return proposal


def sponsorship_reject(*, proposal_id, actor=None, note: str = "", request=None) -> SponsorshipProposal:
    """Reject a submitted proposal with a note; rejecting twice changes nothing."""
    with transaction.atomic():
        proposal = _lock(proposal_id)
        if proposal.state == SponsorshipState.REJECTED:
            return proposal
        if proposal.state == SponsorshipState.APPROVED:
            raise InvalidState(gettext("This proposal was approved and granted; it cannot be rejected."))
        proposal.state = SponsorshipState.REJECTED
        proposal.staff_note = note or proposal.staff_note
        proposal.decided_by = actor if getattr(actor, "pk", None) else None
        proposal.decided_at = db_now()
        proposal.save(update_fields=["state", "staff_note", "decided_by", "decided_at"])
        audit_record(action="sponsorship.reject", org=proposal.organization, actor=proposal.decided_by,
                     target=proposal, request=request, details={"note": note})
        return proposal
