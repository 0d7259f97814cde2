"""Housekeeping tasks: worker heartbeat and idempotency-record expiry."""
import os
import socket

from celery import shared_task

from .idempotency import purge_expired
from .models import WorkerHeartbeat


@shared_task(name="core.worker_heartbeat")
def worker_heartbeat() -> int:
    """Record that a worker process is alive; returns its pid."""
    WorkerHeartbeat.objects.update_or_create(hostname=socket.gethostname(), pid=os.getpid())
    return os.getpid()


@shared_task(name="core.purge_idempotency_records")
def purge_idempotency_records() -> int:
    """Drop Idempotency-Key records older than their 24 h window."""
    return purge_expired()


@shared_task(name="core.outbox_drain")
def outbox_drain_task() -> dict:
    """Beat: publish the task dispatches a broker outage left unsent (core/outbox.py)."""
    from .outbox import outbox_drain

    return outbox_drain()
