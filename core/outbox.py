"""Transactional outbox: a task dispatch that survives a broker outage (SPEC §3).

`outbox_send("provisioning.instance_advance", args=[id])` inside a transaction writes an
OutboxMessage row with the change it follows and, once the transaction commits, publishes the task
and marks the row sent. When the broker is down the publish fails quietly (the request that made
the change still succeeds); the beat task `core.outbox_drain` publishes every row left unsent once
the broker answers again. Delivery is at least once: the consumers (instance steps) are idempotent.
"""
import logging
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.dbclock import db_now

from .models import OutboxMessage

logger = logging.getLogger("cardmix.outbox")

DRAIN_BATCH = 500
# A row the committing process has not marked sent within this time is published by the drain
# (that process crashed, or its publish failed without marking the row).
CLAIM_GRACE = timedelta(seconds=30)
SENT_RETENTION = timedelta(days=1)


def _publish(message: OutboxMessage) -> bool:
    """Publish one row's task; True when the broker took it."""
    try:
        current_app.send_task(message.task, args=message.args, kwargs=message.kwargs,
                              retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.2})
        return True
    except Exception as exc:  # the broker is down: the drain will publish it later
        logger.warning("outbox publish failed; left for the drain",
                       extra={"task": message.task, "outbox_id": message.pk, "error": str(exc)[:200]})
        OutboxMessage.objects.filter(pk=message.pk).update(attempts=message.attempts + 1, last_error=str(exc)[:500])
        return False


def _send_committed(message: OutboxMessage) -> None:
    """After commit: publish now and mark sent, one statement (a stop request waits for this).

    No claim first: the drain takes only rows whose publish failed or that are older than CLAIM_GRACE, so it
    does not race a publish that has just committed; and delivery is at least once anyway."""
    try:
        if _publish(message):
            OutboxMessage.objects.filter(pk=message.pk, sent_at__isnull=True).update(
                sent_at=timezone.now(), attempts=message.attempts + 1)
    except Exception:  # never fail the request that already committed its change
        logger.exception("outbox: immediate send failed; left for the drain", extra={"outbox_id": message.pk})


def outbox_send(task: str, *, args=(), kwargs=None) -> OutboxMessage:
    """Record a task dispatch in the current transaction; publish it once that commits."""
    if settings.CELERY_TASK_ALWAYS_EAGER:  # development/eager mode: nothing to survive
        message = OutboxMessage(task=task, args=list(args), kwargs=dict(kwargs or {}))
        transaction.on_commit(lambda: current_app.tasks[task].apply_async(args=message.args, kwargs=message.kwargs))
        return message
    message = OutboxMessage.objects.create(task=task, args=list(args), kwargs=dict(kwargs or {}))
    transaction.on_commit(lambda: _send_committed(message), robust=True)
    return message


def outbox_drain() -> dict:
    """Publish unsent rows (failed publishes at once, others after CLAIM_GRACE); purge old sent rows."""
    now = db_now()
    sent = failed = 0
    with transaction.atomic():
        due = list(OutboxMessage.objects.select_for_update(skip_locked=True)
                   .filter(sent_at__isnull=True)
                   .filter(_due(now)).order_by("created_at", "pk")[:DRAIN_BATCH])
        for message in due:
            if not _publish(message):
                failed += 1
                break  # the broker is still down: the next pass tries again
            OutboxMessage.objects.filter(pk=message.pk).update(sent_at=now, attempts=message.attempts + 1)
            sent += 1
    purged, _ = OutboxMessage.objects.filter(sent_at__lt=now - SENT_RETENTION).delete()
    if sent or failed:
        logger.info("outbox drain", extra={"sent": sent, "failed": failed})
    return {"sent": sent, "failed": failed, "purged": purged}


def _due(now):
    """Rows whose publish failed, or that nobody marked sent within CLAIM_GRACE."""
    from django.db.models import Q

    return Q(attempts__gt=0) | Q(created_at__lt=now - CLAIM_GRACE)
