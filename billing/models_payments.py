"""Payments (SPEC §4): Stripe top-ups and the webhook events we have applied.

Imported at the end of billing/models.py so Django discovers these models in the `billing` app.
"""
import uuid

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy

# 1 fen = 0.01 CNY = 10,000 µCNY.
UCNY_PER_FEN = 10_000


class TopUpState(models.TextChoices):
    """Lifecycle of a top-up, driven by Stripe events (never by the client)."""

    CREATED = "created", gettext_lazy('Created')
    PROCESSING = "processing", gettext_lazy('Processing')
    SUCCEEDED = "succeeded", gettext_lazy('Succeeded')
    FAILED = "failed", gettext_lazy('Failed')
    REFUNDED = "refunded", gettext_lazy('Refunded')


class TopUp(models.Model):
    """One Stripe PaymentIntent that tops up an organization's cash account."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.PROTECT, related_name="topups")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    amount = models.BigIntegerField(help_text=gettext_lazy("µCNY requested (a whole number of fen)"))
    amount_fen = models.BigIntegerField()
    state = models.CharField(max_length=12, choices=TopUpState.choices, default=TopUpState.CREATED)
    stripe_payment_intent_id = models.CharField(max_length=255, null=True, blank=True, unique=True)
    # Kept only while the customer still has to confirm; cleared when the top-up settles.
    client_secret = models.CharField(max_length=255, blank=True, default="")
    stripe_charge_id = models.CharField(max_length=255, blank=True, default="", db_index=True)
    amount_received_fen = models.BigIntegerField(default=0)
    # Cumulative fen refunded as applied to the ledger (from charge.refunded), and as requested by
    # operators (caps the next refund before Stripe's event arrives).
    refunded_fen = models.BigIntegerField(default=0)
    refund_requested_fen = models.BigIntegerField(default=0)
    credited_at = models.DateTimeField(null=True, blank=True)
    failure_message = models.CharField(max_length=500, blank=True, default="")
    # Operators' attention: a refund took the organization's cash below zero.
    needs_review = models.BooleanField(default=False, db_index=True)
    review_reason = models.CharField(max_length=300, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["organization", "-created_at"])]
        constraints = [
            models.CheckConstraint(condition=models.Q(amount_fen__gt=0), name="topup_amount_fen_positive"),
            models.CheckConstraint(condition=models.Q(amount=models.F("amount_fen") * UCNY_PER_FEN),
                                   name="topup_amount_is_fen"),
        ]

    def __str__(self):
        return f"top-up {self.id} ({self.state})"

    @property
    def refunded_ucny(self) -> int:
        """What was refunded (as applied to the ledger), in µCNY."""
        return self.refunded_fen * UCNY_PER_FEN

    @property
    def refundable_fen(self) -> int:
        """Captured minus what was refunded or requested so far."""
        return max(0, self.amount_received_fen - max(self.refunded_fen, self.refund_requested_fen))


class StripeEvent(models.Model):
    """A Stripe webhook event applied once (its id is the primary key, so a replay is a no-op)."""

    id = models.CharField(max_length=255, primary_key=True)
    type = models.CharField(max_length=100)
    # Stripe's `created` (epoch seconds) of the event.
    stripe_created = models.BigIntegerField(null=True, blank=True)
    object_id = models.CharField(max_length=255, blank=True, default="", db_index=True)
    topup = models.ForeignKey(TopUp, null=True, blank=True, on_delete=models.SET_NULL, related_name="events")
    source = models.CharField(max_length=20, default="webhook")  # webhook | reconciliation
    outcome = models.CharField(max_length=40, blank=True, default="")
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-received_at"]

    def __str__(self):
        return f"{self.type} {self.id}"


__all__ = ["UCNY_PER_FEN", "StripeEvent", "TopUp", "TopUpState"]
