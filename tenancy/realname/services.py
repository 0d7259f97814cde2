"""Real-name verification writes: a customer submits, an operator (or the configured provider) approves or
rejects. Approval marks the organization verified, which lifts tenancy/realname/policy.py's limits."""
import logging

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils.module_loading import import_string
from django.utils.translation import gettext

from core.cn_codes import id_number_error, id_number_masked, uscc_error
from core.dbclock import db_now
from core.errors import InvalidState, ValidationFailed
from core.mail import send_to_people

from ..audit import audit_record
from ..choices import Role
from ..lock_objects import organization_lock
from ..models_realname import LICENCE_MAX_BYTES, RealNameKind, RealNameState, RealNameVerification
from ..selectors import members_to_tell
from .sealing import id_number_seal

logger = logging.getLogger("cardmix.realname")

# What a licence upload may be, by its first bytes (the browser's content type is not trusted).
LICENCE_MAGIC = {b"%PDF-": "application/pdf", b"\x89PNG\r\n\x1a\n": "image/png", b"\xff\xd8\xff": "image/jpeg"}


def _licence_type(data: bytes) -> str:
    return next((kind for magic, kind in LICENCE_MAGIC.items() if data.startswith(magic)), "")


def _clean(*, kind: str, legal_name: str, id_number: str, credit_code: str, licence: bytes | None) -> dict:
    """The submission's fields checked and normalised, or ValidationFailed naming every bad field."""
    errors: dict[str, list[str]] = {}
    legal_name = (legal_name or "").strip()
    id_number = (id_number or "").strip().upper()
    credit_code = (credit_code or "").strip().upper()
    if kind not in RealNameKind.values:
        errors["kind"] = [gettext("Choose one of %(kinds)s.") % {"kinds": ", ".join(RealNameKind.values)}]
    if not legal_name:
        errors["legal_name"] = [gettext("The registered name is required.")]
    elif len(legal_name) > 100:
        errors["legal_name"] = [gettext("At most 100 characters.")]
    fields = {"kind": kind, "legal_name": legal_name, "id_number": "", "credit_code": "", "licence": None,
              "licence_type": ""}
    if kind == RealNameKind.INDIVIDUAL:
        if why := id_number_error(id_number):
            errors["id_number"] = [why]
        fields["id_number"] = id_number
    elif kind == RealNameKind.ENTERPRISE:
        if why := uscc_error(credit_code):
            errors["credit_code"] = [why]
        licence = licence or b""
        licence_type = _licence_type(licence)
        if not licence:
            errors["licence"] = [gettext("Upload the business licence (营业执照) as a PDF, PNG or JPEG.")]
        elif not licence_type:
            errors["licence"] = [gettext("The licence must be a PDF, PNG or JPEG file.")]
        elif len(licence) > LICENCE_MAX_BYTES:
            errors["licence"] = [gettext("At most %(mib)d MiB.") % {"mib": LICENCE_MAX_BYTES // (1024 * 1024)}]
        fields.update(credit_code=credit_code, licence=licence, licence_type=licence_type)
    if errors:
        raise ValidationFailed(gettext("The verification is invalid."), details=errors)
    return fields


def realname_submit(*, org, actor, kind: str, legal_name: str, id_number: str = "", credit_code: str = "",
                    licence: bytes | None = None, request=None) -> RealNameVerification:
    """Submit the organization's real name for review (owners and admins). Refused while one is pending or the
    organization is verified; the identification number is sealed and only its mask is kept readable. The
    configured provider (REALNAME_PROVIDER) is asked once the row has committed."""
    fields = _clean(kind=kind, legal_name=legal_name, id_number=id_number, credit_code=credit_code, licence=licence)
    number = fields.pop("id_number")
    try:
        with transaction.atomic():
            org = organization_lock(org.pk)
            if org.real_name_verified_at is not None:
                raise InvalidState(gettext("This organization's real name is already verified."))
            verification = RealNameVerification.objects.create(
                organization=org, submitted_by=actor if getattr(actor, "pk", None) else None,
                id_number_sealed=id_number_seal(number) if number else None,
                id_number_masked=id_number_masked(number) if number else "", **fields)
            audit_record(action="realname.submit", org=org, actor=verification.submitted_by, target=verification,
                         request=request, details={"kind": kind, "legal_name": fields["legal_name"],
                                                   "id_number": verification.id_number_masked,
                                                   "credit_code": fields["credit_code"]})
    except IntegrityError:  # realname_one_pending_per_org: one is already under review
        raise InvalidState(gettext("A verification is already under review; wait for its decision.")) from None
    if settings.REALNAME_PROVIDER:
        verification = _provider_ask(verification, number)
    return verification


def _provider_ask(verification: RealNameVerification, number: str) -> RealNameVerification:
    """Ask the automated check; its verdict decides as an operator's would, anything else leaves it for review."""
    try:
        answer = dict(import_string(settings.REALNAME_PROVIDER)(verification, number) or {})
    except Exception:  # a provider outage must not lose the submission: an operator reviews it instead
        logger.exception("real-name provider failed", extra={"verification": str(verification.pk)})
        return verification
    RealNameVerification.objects.filter(pk=verification.pk).update(
        provider_result={k: v for k, v in answer.items() if isinstance(v, str | int | bool | None)})
    if answer.get("verdict") == RealNameState.APPROVED:
        return realname_approve(verification_id=verification.pk, actor=None)
    if answer.get("verdict") == RealNameState.REJECTED:
        return realname_reject(verification_id=verification.pk, actor=None,
                               reason=str(answer.get("reason") or "The automated check did not match.")[:300])
    verification.refresh_from_db()
    return verification


def _decide(verification_id, *, state: str, actor, reason: str, request) -> RealNameVerification:
    with transaction.atomic():
        verification = (RealNameVerification.objects.select_for_update().defer("licence")
                        .select_related("organization").get(pk=verification_id))
        org = organization_lock(verification.organization_id)
        if verification.state != RealNameState.PENDING:
            raise InvalidState(gettext("This verification is already %(state)s.") % {"state": verification.state})
        now = db_now()
        verification.state, verification.reason = state, reason
        verification.decided_by = actor if getattr(actor, "pk", None) else None
        verification.decided_at = now
        verification.save(update_fields=["state", "reason", "decided_by", "decided_at"])
        if state == RealNameState.APPROVED:
            org.real_name_verified_at = now
            org.save(update_fields=["real_name_verified_at"])
        audit_record(action=f"realname.{'approve' if state == RealNameState.APPROVED else 'reject'}", org=org,
                     actor=verification.decided_by, target=verification, request=request,
                     details={"reason": reason, "by": "operator" if verification.decided_by else "provider"})
        _tell_owners(org, verification)
    return verification


def realname_approve(*, verification_id, actor=None, request=None) -> RealNameVerification:
    """Operators (or the provider, actor None): approve; the organization is verified from now on."""
    return _decide(verification_id, state=RealNameState.APPROVED, actor=actor, reason="", request=request)


def realname_reject(*, verification_id, reason: str, actor=None, request=None) -> RealNameVerification:
    """Operators (or the provider): reject with the reason the customer reads; they may submit again."""
    reason = (reason or "").strip()
    if not reason:
        raise ValidationFailed(gettext("Say why, for the customer."),
                               details={"reason": [gettext("A reason is required.")]})
    return _decide(verification_id, state=RealNameState.REJECTED, actor=actor, reason=reason[:300], request=request)


def _tell_owners(org, verification: RealNameVerification) -> None:
    """Email the owners and admins the decision, each in their language (an operator decides in theirs)."""
    people = members_to_tell(org_id=org.pk, roles=[Role.OWNER, Role.ADMIN])
    values = {"org": org.name, "name": verification.legal_name, "reason": verification.reason}

    def render():
        if verification.state == RealNameState.APPROVED:
            return (gettext("Cardmix: %(org)s is verified") % values,
                    gettext("The real-name verification of %(org)s (%(name)s) was approved. Every card type, bare "
                            "metal and top-ups of any size are open to the organization now.") % values)
        return (gettext("Cardmix: %(org)s's verification was not approved") % values,
                gettext("The real-name verification of %(org)s (%(name)s) was rejected: %(reason)s\n\nCorrect it "
                        "and submit again in the console.") % values)

    send_to_people(people, render)
