"""Rows the API conventions need: stored responses for Idempotency-Key replays."""
import uuid

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy


class IdempotencyRecord(models.Model):
    """One creating request's key and its stored response, kept IDEMPOTENCY_TTL (SPEC §5)."""

    class State(models.TextChoices):
        IN_PROGRESS = "in_progress", gettext_lazy('In Progress')
        DONE = "done", gettext_lazy('Done')

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Scope (SPEC §5): organization, credential, method, path. The organization is an id, not a
    # foreign key, so core stays below tenancy; "" when there is none.
    organization_id = models.CharField(max_length=36, blank=True, default="")
    credential = models.CharField(max_length=80)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=300)
    key = models.CharField(max_length=255)
    body_hash = models.CharField(max_length=64)
    state = models.CharField(max_length=12, choices=State.choices, default=State.IN_PROGRESS)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["organization_id", "credential", "method", "path", "key"],
                name="idempotency_scope_unique",
            )
        ]

    def __str__(self):
        return f"{self.method} {self.path} [{self.key}]"


class WorkerHeartbeat(models.Model):
    """Last time each Celery worker process ran the heartbeat task (shown by /healthz)."""

    hostname = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    seen_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["hostname", "pid"], name="worker_heartbeat_unique")]

    def __str__(self):
        return f"{self.hostname}:{self.pid}"


class OutboxMessage(models.Model):
    """A task dispatch written in the same transaction as the change it follows (core/outbox.py)."""

    task = models.CharField(max_length=200)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    created_at = models.DateTimeField(db_default=Now())
    sent_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["created_at"], condition=models.Q(sent_at__isnull=True),
                                name="outbox_unsent_idx")]

    def __str__(self):
        return f"{self.task}{self.args} ({'sent' if self.sent_at else 'unsent'})"
