"""Webhook endpoints of an organization, their signing secrets, and every event and delivery attempt."""
import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy


class WebhookEndpoint(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.CASCADE,
                                     related_name="webhook_endpoints")
    url = models.URLField(max_length=500)
    description = models.CharField(max_length=200, blank=True)
    event_types = models.JSONField(default=list)  # subset of events.EVENT_TYPES
    enabled = models.BooleanField(default=True)
    disabled_reason = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["organization"], condition=Q(deleted_at__isnull=True, enabled=True),
                                name="webhook_endpoint_live_idx")]

    def __str__(self):
        return self.url


class WebhookSecret(models.Model):
    """A signing secret (Fernet-encrypted). After a rotation the old one signs too until `expires_at`."""

    id = models.BigAutoField(primary_key=True)
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="secrets")
    secret_encrypted = models.BinaryField()
    prefix = models.CharField(max_length=16)  # "whsec_" + a few characters, to tell secrets apart
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"{self.prefix}…"


class WebhookEvent(models.Model):
    """One event as sent: its id is the `webhook-id` header, the same for every attempt and endpoint."""

    id = models.CharField(primary_key=True, max_length=40)  # "msg_" + uuid hex
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.CASCADE, related_name="+")
    type = models.CharField(max_length=60)
    payload = models.JSONField()  # {"type", "timestamp", "data"}
    # What the event is about and the happening it records, so a retried caller never emits it twice.
    dedupe_key = models.CharField(max_length=200)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["organization", "dedupe_key"], name="webhook_event_once")]

    def __str__(self):
        return f"{self.type} {self.id}"


class DeliveryState(models.TextChoices):
    PENDING = "pending", gettext_lazy("pending")
    SUCCEEDED = "succeeded", gettext_lazy("succeeded")
    FAILED = "failed", gettext_lazy("failed")  # gave up after the last retry
    SKIPPED = "skipped", gettext_lazy("skipped")  # the endpoint was disabled or deleted before it could go


class WebhookDelivery(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    event = models.ForeignKey(WebhookEvent, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    state = models.CharField(max_length=12, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["next_attempt_at"], condition=Q(state="pending"),
                                name="webhook_delivery_due_idx"),
                   models.Index(fields=["endpoint", "-created_at"], name="webhook_delivery_endpoint_idx")]

    def __str__(self):
        return f"{self.event_id} → {self.endpoint_id} ({self.state})"

    @property
    def last_attempt(self):
        """The latest attempt (from the selector's prefetch, oldest first)."""
        rows = list(self.attempt_rows.all())
        return rows[-1] if rows else None


class WebhookAttempt(models.Model):
    """One HTTP try: what the receiver answered (body truncated), or why it could not be reached."""

    id = models.BigAutoField(primary_key=True)
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_rows")
    attempted_at = models.DateTimeField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True)
    error = models.CharField(max_length=300, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    succeeded = models.BooleanField(default=False)

    def __str__(self):
        return f"{self.attempted_at:%Y-%m-%d %H:%M:%S} {self.status_code or self.error[:40]}"
