"""Stripe events applied exactly once: the webhook and reconciliation share `stripe_event_apply`.

Exactly once rests on three things inside ONE transaction: the StripeEvent row (primary key = the
event id, so a replayed or concurrent copy waits on the unique index and then finds the row), the
TopUp row lock (orders events about one PaymentIntent), and the ledger's transfer key
(`stripe_pi:<id>`, `stripe_refund:<charge>:<cumulative>`), which makes a second event for the
same payment — e.g. reconciliation's and then the late webhook's — a replay that moves nothing.
Any exception rolls all three back and the webhook answers 5xx, so Stripe retries.
"""
import json
import logging
import time
import uuid

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext, gettext_noop

from billing.choices import AccountKind, TransferCode
from billing.fapiao.services import fapiao_refund_flag
from billing.models import Account
from billing.models_payments import UCNY_PER_FEN, StripeEvent, TopUp, TopUpState
from core.errors import ValidationFailed
from core.failpoints import failpoint
from core.money import format_ucny
from core.outbox import outbox_send
from tenancy.audit import audit_record

from . import ledger_calls
from .stripe_client import object_id

logger = logging.getLogger("cardmix.payments")

# Outcomes that changed nothing: their event row is rolled back as well ("recorded nowhere").
NO_CHANGE = frozenset({"ignored", "unknown_payment_intent", "already_applied", "stale", "rejected_currency"})


def stripe_event_verify(*, payload: bytes, signature: str | None) -> dict:
    """The event as a dict if `Stripe-Signature` is valid over the raw body (tolerance 300 s), else 400."""
    import stripe

    try:
        stripe.WebhookSignature.verify_header(payload, signature, settings.STRIPE_WEBHOOK_SECRET,
                                              tolerance=settings.STRIPE_WEBHOOK_TOLERANCE_SECONDS)
        # stripe-python only refuses old timestamps; one far in the future would stay replayable longer.
        stamp = next((p.split("=", 1)[1] for p in signature.split(",") if p.startswith("t=")), "")
        if int(stamp) > time.time() + settings.STRIPE_WEBHOOK_TOLERANCE_SECONDS:
            raise stripe.SignatureVerificationError("Timestamp in the future", signature, payload)
    except (stripe.SignatureVerificationError, UnicodeDecodeError) as exc:
        # stripe-python decodes the body as UTF-8 before checking; Stripe only signs UTF-8 JSON, so a body
        # that does not decode cannot carry a valid signature: refused (and counted) like a forged one.
        raise ValidationFailed(gettext("The Stripe signature is invalid or too old."),
                               details={"Stripe-Signature": [gettext("Invalid or expired signature.")]}) from exc
    try:
        event = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValidationFailed(gettext("The event body is not JSON."), details={"body": [gettext("Malformed JSON.")]}) from exc
    if not (isinstance(event, dict) and isinstance(event.get("id"), str) and isinstance(event.get("type"), str)
            and isinstance(event.get("data"), dict) and isinstance(event["data"].get("object"), dict)):
        raise ValidationFailed(gettext("The event lacks id, type or data.object."), details={"body": [gettext("Not a Stripe event.")]})
    return event


def _topup_for_intent(intent: dict) -> TopUp | None:
    """Our TopUp for a PaymentIntent, locked; the organization comes from our row, never from metadata."""
    pi_id = object_id(intent.get("id"))
    topup = TopUp.objects.select_for_update().filter(stripe_payment_intent_id=pi_id).first() if pi_id else None
    if topup is not None:
        return topup
    # The PaymentIntent was created but its id never reached our row (a crash in between): adopt it
    # only when metadata names one of our rows that has no intent yet and everything else matches.
    meta = intent.get("metadata") or {}
    try:
        topup_id, org_id = uuid.UUID(str(meta.get("topup_id"))), uuid.UUID(str(meta.get("organization_id")))
    except ValueError:  # not ours, or malformed metadata
        return None
    candidate = TopUp.objects.select_for_update().filter(
        pk=topup_id, organization_id=org_id, stripe_payment_intent_id__isnull=True,
        amount_fen=intent.get("amount")).first()
    if candidate is not None and pi_id:
        candidate.stripe_payment_intent_id = pi_id
        candidate.save(update_fields=["stripe_payment_intent_id", "updated_at"])
    return candidate


def _on_intent_succeeded(intent: dict, row: StripeEvent) -> str:
    topup = _topup_for_intent(intent)
    if topup is None:
        return "unknown_payment_intent"
    row.topup = topup
    if topup.credited_at is not None:
        return "already_applied"
    if intent.get("status") not in (None, "succeeded"):
        return "stale"
    if str(intent.get("currency", "")).lower() != "cny":
        logger.error("payment intent in an unexpected currency", extra={"payment_intent": intent.get("id")})
        return "rejected_currency"
    fen = int(intent.get("amount_received") or intent.get("amount") or 0)
    if fen <= 0:
        return "stale"
    pi_id = topup.stripe_payment_intent_id
    ledger_calls.cash_credit(org=topup.organization, amount=fen * UCNY_PER_FEN, key=f"stripe_pi:{pi_id}",
                             code=TransferCode.TOPUP, payment_ref=pi_id)
    topup.amount_received_fen = fen
    topup.stripe_charge_id = object_id(intent.get("latest_charge")) or topup.stripe_charge_id
    topup.credited_at = timezone.now()
    topup.client_secret = ""  # settled: the console no longer needs it
    topup.failure_message = ""
    topup.state = TopUpState.REFUNDED if topup.refunded_fen >= fen else TopUpState.SUCCEEDED
    topup.save()
    audit_record(action="topup.succeeded", org=topup.organization, target=topup,
                 details={"amount": format_ucny(fen * UCNY_PER_FEN), "payment_intent": pi_id,
                          "event": row.id, "source": row.source})
    # New cash may pay an open postpaid invoice: settle now rather than at the next 5-minute beat. By task
    # name, through the outbox: sent once this commits, and never lost to a broker outage.
    outbox_send("billing.invoices_settle", kwargs={"org_id": str(topup.organization_id)})
    return "credited"


def _on_intent_failed(intent: dict, row: StripeEvent) -> str:
    topup = _topup_for_intent(intent)
    if topup is None:
        return "unknown_payment_intent"
    row.topup = topup
    # Out of order: a failure after success changes nothing. A failed intent may still succeed later
    # with another card, so the client secret is kept.
    if topup.state not in (TopUpState.CREATED, TopUpState.PROCESSING):
        return "stale"
    error = intent.get("last_payment_error") or {}
    topup.state = TopUpState.FAILED
    # Stripe's own words as it gave them; ours stored as the msgid, read in the page's language (the template).
    topup.failure_message = str(error.get("message") or gettext_noop("The payment failed."))[:500]
    topup.save(update_fields=["state", "failure_message", "updated_at"])
    audit_record(action="topup.failed", org=topup.organization, target=topup, details={"event": row.id})
    return "failed"


def _on_intent_processing(intent: dict, row: StripeEvent) -> str:
    topup = _topup_for_intent(intent)
    if topup is None:
        return "unknown_payment_intent"
    row.topup = topup
    if topup.state != TopUpState.CREATED:
        return "stale"
    topup.state = TopUpState.PROCESSING
    topup.save(update_fields=["state", "updated_at"])
    return "processing"


def _on_charge_refunded(charge: dict, row: StripeEvent) -> str:
    """Debit the change in the charge's cumulative amount_refunded, once per cumulative value."""
    pi_id = object_id(charge.get("payment_intent"))
    charge_id = object_id(charge.get("id"))
    topup = TopUp.objects.select_for_update().filter(stripe_payment_intent_id=pi_id).first() if pi_id else None
    if topup is None and charge_id:
        topup = TopUp.objects.select_for_update().filter(stripe_charge_id=charge_id).first()
    if topup is None:
        return "unknown_payment_intent"
    row.topup = topup
    if str(charge.get("currency", "")).lower() != "cny":
        return "rejected_currency"
    cumulative = int(charge.get("amount_refunded") or 0)
    if cumulative <= topup.refunded_fen:
        return "stale"  # a duplicate, or an older event arriving after a newer one
    delta = cumulative - topup.refunded_fen
    ledger_calls.cash_debit(org=topup.organization, amount=delta * UCNY_PER_FEN,
                            key=f"stripe_refund:{charge_id}:{cumulative}", code=TransferCode.REFUND,
                            payment_ref=charge_id)
    topup.refunded_fen = cumulative
    topup.refund_requested_fen = max(topup.refund_requested_fen, cumulative)
    topup.stripe_charge_id = topup.stripe_charge_id or charge_id
    captured = int(charge.get("amount_captured") or charge.get("amount") or topup.amount_received_fen)
    if cumulative >= max(captured, topup.amount_received_fen):
        topup.state = TopUpState.REFUNDED
    cash = Account.objects.filter(organization_id=topup.organization_id, kind=AccountKind.CASH).values_list(
        "balance", flat=True).first()
    if cash is not None and cash < 0:
        # Auto-stop is the ledger's job; operators are told here.
        topup.needs_review = True
        topup.review_reason = f"Refund took cash to {format_ucny(cash)} CNY."
        logger.warning("refund took cash below zero",
                       extra={"organization": str(topup.organization_id), "topup": str(topup.pk), "cash": cash})
    topup.save()
    fapiao_refund_flag(org_id=topup.organization_id)  # a fapiao issued over money now refunded needs reversing
    audit_record(action="topup.refunded", org=topup.organization, target=topup,
                 details={"amount": format_ucny(delta * UCNY_PER_FEN), "cumulative_fen": cumulative,
                          "charge": charge_id, "event": row.id})
    return "debited"


HANDLERS = {
    "payment_intent.succeeded": _on_intent_succeeded,
    "payment_intent.payment_failed": _on_intent_failed,
    "payment_intent.processing": _on_intent_processing,
    "charge.refunded": _on_charge_refunded,
}


def stripe_event_apply(*, event: dict, source: str = "webhook") -> str:
    """Apply one verified event exactly once; returns the outcome (duplicates and no-ops change nothing)."""
    handler = HANDLERS.get(event["type"])
    if handler is None:
        return "ignored"
    obj = event["data"]["object"]
    with transaction.atomic():
        try:
            with transaction.atomic():
                row = StripeEvent.objects.create(id=event["id"], type=event["type"], source=source,
                                                 stripe_created=event.get("created"),
                                                 object_id=object_id(obj.get("id")))
        except IntegrityError:
            return "duplicate"
        outcome = handler(obj, row)
        failpoint("payments:after_apply")  # crash tests: the event row and the credit roll back together
        if outcome in NO_CHANGE:
            transaction.set_rollback(True)
        else:
            row.outcome = outcome
            row.save(update_fields=["outcome", "topup"])
    logger.info("stripe event", extra={"event": event["id"], "type": event["type"], "outcome": outcome,
                                       "source": source})
    return outcome


def synthetic_succeeded_event(intent: dict) -> dict:
    """Reconciliation's stand-in for a missed `payment_intent.succeeded` (its own event id)."""
    return {"id": f"reconcile:{intent['id']}", "type": "payment_intent.succeeded", "created": int(time.time()),
            "data": {"object": intent}}
