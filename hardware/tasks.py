"""Thin Celery tasks of the hardware paths."""
from celery import shared_task


@shared_task(name="hardware.heartbeats_check")
def heartbeats_check() -> list[str]:
    """Beat: mark nodes whose agent went silent as unreachable; returns their hostnames."""
    from .services import heartbeats_check as check

    return check()
