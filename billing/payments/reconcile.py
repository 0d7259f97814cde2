"""Reconciliation: apply succeeded PaymentIntents whose webhook never came (SPEC §4 Payments).

It goes through the webhook's exactly-once path (`stripe_event_apply`), so a webhook that arrives
later — or a second reconciliation run — credits nothing more.
"""
import logging
import time
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from billing.models_payments import TopUp, TopUpState

from .events import stripe_event_apply, synthetic_succeeded_event
from .stripe_client import as_dict, stripe_api

logger = logging.getLogger("cardmix.payments")


def _apply_if_missed(intent: dict, counts: dict) -> None:
    if intent.get("status") != "succeeded":
        return
    # Only ours, and only what is not credited yet (a cheap check before the locked path).
    if not TopUp.objects.filter(stripe_payment_intent_id=intent.get("id"), credited_at__isnull=True).exists():
        return
    outcome = stripe_event_apply(event=synthetic_succeeded_event(intent), source="reconciliation")
    counts[outcome] = counts.get(outcome, 0) + 1


def payments_reconcile(*, hours: int | None = None) -> dict:
    """List recent PaymentIntents at Stripe and credit the succeeded ones we missed; {outcome: count}."""
    hours = settings.STRIPE_RECONCILE_HOURS if hours is None else hours
    cutoff = time.time() - hours * 3600
    stripe = stripe_api()
    counts: dict[str, int] = {}
    seen: set[str] = set()
    # Stripe lists newest first; the cap bounds a run on an account with a long history.
    for n, pi in enumerate(stripe.PaymentIntent.list(limit=100).auto_paging_iter()):
        if n >= settings.STRIPE_RECONCILE_MAX_INTENTS:
            break
        intent = as_dict(pi)
        seen.add(intent["id"])
        if int(intent.get("created") or 0) < cutoff:
            continue
        _apply_if_missed(intent, counts)
    # Our own pending rows that the listing did not reach: ask Stripe about each one directly.
    pending = TopUp.objects.filter(
        stripe_payment_intent_id__isnull=False, credited_at__isnull=True,
        state__in=[TopUpState.CREATED, TopUpState.PROCESSING, TopUpState.FAILED],
        created_at__gte=timezone.now() - timedelta(hours=hours),
    ).exclude(stripe_payment_intent_id__in=seen).values_list("stripe_payment_intent_id", flat=True)[:200]
    for pi_id in pending:
        _apply_if_missed(as_dict(stripe.PaymentIntent.retrieve(pi_id)), counts)
    if counts:
        logger.info("payments reconciled", extra={"outcomes": counts})
    return counts
