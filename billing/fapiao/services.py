"""Fapiao requests: ask (never above what was paid minus what was refunded or already invoiced), cancel while
not yet issued, issue with the PDF or reject with a reason (operators), and flag issued fapiao for a red-letter
(红字) reversal when a refund leaves them above what was paid.

Every change to an organization's fapiao runs under one advisory lock per organization, so two requests at once
cannot together exceed what was paid, and a refund's flagging sees every issued fapiao."""
import logging

from django.db import transaction
from django.utils.translation import gettext, gettext_lazy

from core.cn_codes import uscc_error
from core.dbclock import db_now
from core.errors import InvalidState, NotFoundError, ValidationFailed
from core.locks import advisory_xact_lock
from core.mail import person, send_to_people
from core.money import format_fen, format_ucny
from tenancy.audit import audit_record
from tenancy.models import Organization
from tenancy.selectors import user_language

from ..models_fapiao import PDF_MAX_BYTES, FapiaoKind, FapiaoRequest, FapiaoState
from ..models_payments import UCNY_PER_FEN
from .selectors import invoiceable

logger = logging.getLogger("cardmix.billing")

# The buyer's fields a 专用 fapiao must carry (the tax bureau's format); a 普通 one needs only the title, plus the
# taxpayer id when the buyer is a company.
SPECIAL_REQUIRED = ("taxpayer_id", "address", "phone", "bank_name", "bank_account")
LABELS = {"taxpayer_id": gettext_lazy("taxpayer id"), "address": gettext_lazy("registered address"),
          "phone": gettext_lazy("registered phone"), "bank_name": gettext_lazy("bank"),
          "bank_account": gettext_lazy("bank account")}


def _lock(org_id) -> None:
    advisory_xact_lock(f"fapiao:{org_id}")


def _clean(fields: dict) -> dict:
    return {k: (v or "").strip() for k, v in fields.items()}


def _field_errors(kind: str, amount: int, buyer: dict) -> dict:
    errors: dict = {}
    if kind not in FapiaoKind.values:
        errors["kind"] = [gettext("One of %(values)s.") % {"values": ", ".join(FapiaoKind.values)}]
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        errors["amount"] = [gettext("Must be more than 0.")]
    elif amount % UCNY_PER_FEN:
        errors["amount"] = [gettext("A fapiao is issued in whole fen (at most 2 decimals).")]
    if not buyer["title"]:
        errors["title"] = [gettext("The buyer's name (抬头) is required.")]
    if kind == FapiaoKind.SPECIAL:
        for name in SPECIAL_REQUIRED:
            if not buyer[name]:
                errors[name] = [gettext("A 专用 fapiao needs the buyer's %(field)s.") % {"field": LABELS[name]}]
    if buyer["taxpayer_id"] and "taxpayer_id" not in errors:
        buyer["taxpayer_id"] = buyer["taxpayer_id"].upper()
        if why := uscc_error(buyer["taxpayer_id"]):
            errors["taxpayer_id"] = [why]
    return errors


def fapiao_request(*, org, user=None, kind: str, amount: int, title: str, taxpayer_id: str = "", address: str = "",
                   phone: str = "", bank_name: str = "", bank_account: str = "", email: str = "", note: str = "",
                   request=None) -> FapiaoRequest:
    """Ask for a fapiao over `amount` µCNY (whole fen) of what the organization paid and has not invoiced yet."""
    buyer = _clean({"title": title, "taxpayer_id": taxpayer_id, "address": address, "phone": phone,
                    "bank_name": bank_name, "bank_account": bank_account})
    errors = _field_errors(kind, amount, buyer)
    if errors:
        raise ValidationFailed(gettext("The fapiao request is incomplete."), details=errors)
    actor = user if getattr(user, "pk", None) else None
    with transaction.atomic():
        _lock(org.pk)
        left = invoiceable(org=org)["available"]
        if amount > left:
            raise ValidationFailed(
                gettext("The fapiao is larger than what was paid and not yet invoiced or refunded."),
                details={"amount": [gettext('At most %(format_ucny)s CNY can be invoiced now.') % {'format_ucny': format_ucny(left)}]})
        fapiao = FapiaoRequest.objects.create(
            organization=org, requested_by=actor, kind=kind, amount=amount, **buyer,
            email=(email or getattr(actor, "email", "") or "").strip(), note=(note or "").strip())
        audit_record(action="fapiao.request", org=org, actor=actor, target=fapiao, request=request,
                     details={"kind": kind, "amount": format_ucny(amount)})
    return fapiao


def _locked(fapiao_id, org=None) -> FapiaoRequest:
    rows = FapiaoRequest.objects.select_for_update(of=("self",)).select_related("organization", "requested_by")
    fapiao = rows.filter(pk=fapiao_id, **({"organization": org} if org is not None else {})).first()
    if fapiao is None:
        raise NotFoundError(gettext("Fapiao request not found."))
    return fapiao


def fapiao_cancel(*, org, fapiao_id, actor=None, request=None) -> FapiaoRequest:
    """Withdraw a request the operators have not issued yet; its amount can be invoiced again."""
    with transaction.atomic():
        _lock(org.pk)
        fapiao = _locked(fapiao_id, org)
        if fapiao.state == FapiaoState.CANCELLED:
            return fapiao
        if fapiao.state != FapiaoState.REQUESTED:
            raise InvalidState(gettext('This fapiao is %(state)s; only a request not yet issued can be cancelled.') % {'state': fapiao.state})
        fapiao.state = FapiaoState.CANCELLED
        fapiao.save(update_fields=["state"])
        audit_record(action="fapiao.cancel", org=org, actor=actor, target=fapiao, request=request)
    return fapiao


def _tell(fapiao: FapiaoRequest, render) -> None:
    """Email the requester and the request's address, each in their language: the address's account's, else the
    requester's (an operator's decision is no reason to write in the operator's language)."""
    requester = fapiao.requested_by
    fallback = requester.language if requester is not None else ""
    people = [person(getattr(requester, "email", ""), fallback),
              person(fapiao.email, (user_language(email=fapiao.email) if fapiao.email else "") or fallback)]
    send_to_people(people, render)


def fapiao_issue(*, fapiao_id, number: str, pdf: bytes, actor=None, request=None) -> FapiaoRequest:
    """Operators: mark a request issued with its fapiao number and PDF. Refused when refunds since the request
    left it above what the organization has paid and not otherwise invoiced."""
    number = (number or "").strip()
    errors: dict = {}
    if not (number.isdigit() and 8 <= len(number) <= 20):
        errors["number"] = [gettext("The fapiao number: 8 to 20 digits.")]
    if not pdf or not pdf.startswith(b"%PDF-"):
        errors["pdf"] = [gettext("Upload the fapiao as a PDF file.")]
    elif len(pdf) > PDF_MAX_BYTES:
        errors["pdf"] = [gettext("At most %(mib)s MiB.") % {"mib": PDF_MAX_BYTES // (1024 * 1024)}]
    if errors:
        raise ValidationFailed(gettext("The fapiao cannot be marked issued."), details=errors)
    with transaction.atomic():
        org_id = FapiaoRequest.objects.filter(pk=fapiao_id).values_list("organization_id", flat=True).first()
        if org_id is None:
            raise NotFoundError(gettext("Fapiao request not found."))
        _lock(org_id)
        fapiao = _locked(fapiao_id)
        if fapiao.state != FapiaoState.REQUESTED:
            raise InvalidState(gettext('This fapiao is %(state)s; only a request can be issued.') % {'state': fapiao.state})
        over = -invoiceable(org=fapiao.organization)["available"]
        if over > 0:
            raise InvalidState(gettext('Refunds since this request leave it %(format_ucny)s CNY above what was paid; reject it with that reason so the customer can ask again.') % {'format_ucny': format_ucny(over)})
        fapiao.state, fapiao.number, fapiao.pdf = FapiaoState.ISSUED, number, pdf
        fapiao.decided_by, fapiao.decided_at = (actor if getattr(actor, "pk", None) else None), db_now()
        fapiao.save(update_fields=["state", "number", "pdf", "decided_by", "decided_at"])
        audit_record(action="fapiao.issue", org=fapiao.organization, actor=fapiao.decided_by, target=fapiao,
                     request=request, details={"number": number, "amount": format_ucny(fapiao.amount)})
        _tell(fapiao, lambda: (
            gettext("Cardmix: fapiao %(number)s issued") % {"number": number},
            gettext("Your fapiao %(number)s (%(title)s, %(amount)s) has been issued. Download it from Billing → "
                    "Fapiao in the console.") % {"number": number, "title": fapiao.title,
                                                  "amount": format_fen(fapiao.amount)}))
    return fapiao


def fapiao_reject(*, fapiao_id, reason: str, actor=None, request=None) -> FapiaoRequest:
    """Operators: refuse a request with the reason the customer sees; its amount can be invoiced again."""
    reason = (reason or "").strip()
    if not reason:
        raise ValidationFailed(gettext("Say why the fapiao is rejected."), details={"reason": [gettext("The customer sees this.")]})
    with transaction.atomic():
        fapiao = _locked(fapiao_id)
        if fapiao.state == FapiaoState.REJECTED:
            return fapiao
        if fapiao.state != FapiaoState.REQUESTED:
            raise InvalidState(gettext('This fapiao is %(state)s; only a request can be rejected.') % {'state': fapiao.state})
        fapiao.state, fapiao.reason = FapiaoState.REJECTED, reason[:300]
        fapiao.decided_by, fapiao.decided_at = (actor if getattr(actor, "pk", None) else None), db_now()
        fapiao.save(update_fields=["state", "reason", "decided_by", "decided_at"])
        audit_record(action="fapiao.reject", org=fapiao.organization, actor=fapiao.decided_by, target=fapiao,
                     request=request, details={"reason": fapiao.reason})
        _tell(fapiao, lambda: (
            gettext("Cardmix: fapiao request rejected"),
            gettext("Your fapiao request (%(title)s, %(amount)s) was rejected: %(reason)s") % {
                "title": fapiao.title, "amount": format_fen(fapiao.amount), "reason": fapiao.reason}))
    return fapiao


def fapiao_refund_flag(*, org_id) -> int:
    """After a refund: when what is invoiced (issued, net of earlier reversals) exceeds what was paid minus what was
    refunded, flag the newest issued fapiao for a red-letter reversal of the excess. Returns µCNY newly flagged.
    Call inside the refund's transaction."""
    _lock(org_id)
    org = Organization.objects.get(pk=org_id)
    figures = invoiceable(org=org, states=(FapiaoState.ISSUED,))
    excess = -figures["available"]
    flagged = 0
    if excess <= 0:
        return 0
    issued = list(FapiaoRequest.objects.select_for_update().filter(organization_id=org_id, state=FapiaoState.ISSUED)
                  .order_by("-decided_at", "-pk"))
    now = db_now()
    for fapiao in issued:
        part = min(excess - flagged, fapiao.amount - fapiao.red_letter_amount)
        if part <= 0:
            continue
        fapiao.red_letter_amount += part
        fapiao.red_letter_flagged_at = now
        fapiao.save(update_fields=["red_letter_amount", "red_letter_flagged_at"])
        audit_record(action="fapiao.red_letter_needed", org=org, target=fapiao,
                     details={"number": fapiao.number, "amount": format_ucny(part)})
        logger.warning("refund after fapiao issue: red-letter reversal needed",
                       extra={"organization": str(org_id), "fapiao": str(fapiao.pk), "amount": part})
        flagged += part
        if flagged >= excess:
            break
    return flagged
