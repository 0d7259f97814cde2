"""Top-ups and refunds: the writes that call Stripe (SPEC §4 Payments).

Events from Stripe (webhook or reconciliation) are applied in `events.py`; this module creates
PaymentIntents and Refunds. Stripe calls carry idempotency keys derived from our own rows, so a
network retry, or a retry of the whole request, never creates a second object at Stripe.
"""
import logging

from django.conf import settings
from django.db import models, transaction
from django.utils.translation import gettext, gettext_noop

from billing.models_payments import UCNY_PER_FEN, TopUp, TopUpState
from core.errors import InvalidState, ServiceUnavailable, ValidationFailed
from core.money import format_ucny
from tenancy.audit import audit_record
from tenancy.lock_objects import organization_lock
from tenancy.realname.policy import org_unverified, topup_check

from .standin import standin_intent_kwargs
from .stripe_client import stripe_api

logger = logging.getLogger("cardmix.payments")
DEV_API_KEY = "sk_test_cardmix_dev"  # settings' embedded default: no Stripe account answers to it


def topup_amount_validate(amount: int) -> int:
    """The amount in fen, or ValidationFailed (sub-fen precision, outside TOPUP_MIN/MAX)."""
    if amount % UCNY_PER_FEN:
        raise ValidationFailed(gettext("The amount must be a whole number of fen."),
                               details={"amount": [gettext("Sub-fen precision is not allowed (at most 2 decimals).")]})
    if amount < settings.TOPUP_MIN_UCNY or amount > settings.TOPUP_MAX_UCNY:
        raise ValidationFailed(
            gettext("The amount is out of range."),
            details={"amount": [gettext('Top up between %(format_ucny)s and %(format_ucny2)s CNY.') % {'format_ucny': format_ucny(settings.TOPUP_MIN_UCNY), 'format_ucny2': format_ucny(settings.TOPUP_MAX_UCNY)}]})
    return amount // UCNY_PER_FEN


def payments_unavailable() -> str:
    """Why this server cannot take payments at all ("" when it can): the embedded development keys with no Stripe
    stand-in (`make run` starts one) are no Stripe account, so the top-up page says so and disables Pay."""
    if settings.STRIPE_STANDIN or settings.STRIPE_API_BASE:
        return ""
    if settings.STRIPE_API_KEY == DEV_API_KEY:
        return gettext("Payments are not set up on this server: it runs with the built-in development keys and no "
                       "Stripe stand-in. `make run` starts a local one (localstripe); an operator sets STRIPE_API_KEY "
                       "and STRIPE_PUBLISHABLE_KEY for real payments.")
    return ""


def payment_method_types() -> list[str]:
    """Card always; Alipay / WeChat Pay when the Stripe account supports them (setting)."""
    return ["card", *[m for m in settings.STRIPE_EXTRA_PAYMENT_METHODS if m != "card"]]


def topup_create(*, org, actor=None, amount: int, request=None) -> TopUp:
    """Create a TopUp row and its Stripe PaymentIntent in CNY fen; returns the TopUp."""
    return topup_intent_create(topup_row_create(org=org, actor=actor, amount=amount, request=request))


def topup_row_create(*, org, actor=None, amount: int, request=None) -> TopUp:
    """The TopUp row of a new top-up (audited), without its PaymentIntent yet: topup_intent_create, once the row
    has committed."""
    amount_fen = topup_amount_validate(amount)
    with transaction.atomic():
        if org_unverified(org):  # the organization row lock: two top-ups at once cannot both pass the cap
            org = organization_lock(org.pk)
            already = (TopUp.objects.filter(organization=org).exclude(state=TopUpState.FAILED)
                       .aggregate(total=models.Sum("amount"))["total"] or 0)
            topup_check(org, amount=amount, already=already)
        topup = TopUp.objects.create(organization=org, created_by=actor if getattr(actor, "pk", None) else None,
                                     amount=amount, amount_fen=amount_fen)
        audit_record(action="topup.create", org=org, actor=topup.created_by, target=topup, request=request,
                     details={"amount": format_ucny(amount)})
    return topup


def topup_intent_create(topup: TopUp) -> TopUp:
    """Create the committed top-up's Stripe PaymentIntent and store its id and client secret; returns the TopUp."""
    # The PaymentIntent is created after the row commits (no transaction open across the network).
    # Its Stripe idempotency key is our row id: a retry after a lost response returns the same intent.
    stripe = stripe_api()
    try:
        intent = stripe.PaymentIntent.create(
            amount=topup.amount_fen,
            currency="cny",
            payment_method_types=payment_method_types(),
            metadata={"organization_id": str(topup.organization_id), "topup_id": str(topup.pk)},
            idempotency_key=f"cardmix-topup-{topup.pk}",
            **standin_intent_kwargs(stripe),
        )
    except stripe.StripeError as exc:
        logger.warning("stripe payment intent create failed",
                       extra={"topup": str(topup.pk), "error": type(exc).__name__,
                              "stripe_request_id": getattr(exc, "request_id", None)})
        TopUp.objects.filter(pk=topup.pk).update(state=TopUpState.FAILED,
                                                 failure_message=gettext_noop("The payment provider did not answer."))
        raise ServiceUnavailable(gettext("The payment provider is unavailable; retry shortly.")) from exc
    TopUp.objects.filter(pk=topup.pk).update(stripe_payment_intent_id=intent.id,
                                             client_secret=intent.client_secret or "")
    topup.refresh_from_db()
    return topup


def topup_refund(*, topup_id, amount_fen: int, actor=None, request=None) -> TopUp:
    """Refund part of a captured top-up at Stripe (operators only); the ledger moves on charge.refunded.

    Capped by what was captured minus what was refunded or already requested. The row lock
    serialises two operators refunding the same top-up; the Stripe idempotency key names the
    cumulative amount requested, so a retry after a lost response returns the same refund.
    """
    if not isinstance(amount_fen, int) or isinstance(amount_fen, bool) or amount_fen <= 0:
        raise ValidationFailed(gettext("The refund amount must be positive."), details={"amount": [gettext("Must be > 0 fen.")]})
    with transaction.atomic():
        topup = TopUp.objects.select_for_update(of=("self",)).select_related("organization").get(pk=topup_id)
        if topup.credited_at is None or not topup.stripe_payment_intent_id:
            raise InvalidState(gettext("Only a top-up whose payment succeeded can be refunded."))
        remaining = topup.refundable_fen
        if amount_fen > remaining:
            raise ValidationFailed(
                gettext("The refund is larger than what remains of the captured amount."),
                details={"amount": [gettext('At most %(format_ucny)s CNY can be refunded.') % {'format_ucny': format_ucny(remaining * UCNY_PER_FEN)}]})
        requested_after = max(topup.refunded_fen, topup.refund_requested_fen) + amount_fen
        stripe = stripe_api()
        try:
            refund = stripe.Refund.create(
                payment_intent=topup.stripe_payment_intent_id,
                amount=amount_fen,
                metadata={"organization_id": str(topup.organization_id), "topup_id": str(topup.pk)},
                idempotency_key=f"cardmix-refund-{topup.pk}-{requested_after}",
            )
        except stripe.StripeError as exc:
            logger.warning("stripe refund create failed",
                           extra={"topup": str(topup.pk), "error": type(exc).__name__,
                                  "stripe_request_id": getattr(exc, "request_id", None)})
            raise ServiceUnavailable(gettext("The payment provider refused or did not answer; retry shortly.")) from exc
        topup.refund_requested_fen = requested_after
        topup.save(update_fields=["refund_requested_fen", "updated_at"])
        audit_record(action="topup.refund", org=topup.organization, actor=actor, target=topup, request=request,
                     details={"amount": format_ucny(amount_fen * UCNY_PER_FEN), "stripe_refund": refund.id})
    return topup
