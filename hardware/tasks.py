"""Thin Celery tasks of the hardware paths."""
from celery import shared_task

from inventory.models import Node


@shared_task(name="hardware.heartbeats_check")
def heartbeats_check() -> list[str]:
    """Beat: mark nodes whose agent went silent as unreachable; returns their hostnames."""
    from .services import heartbeats_check as check

    return check()


@shared_task(name="hardware.node_clean")
def node_clean_task(node_id: str, previous_state: str | None = None) -> str:
    """Clean one node (wipe + health check); returns its final state."""
    from .cleaning import node_clean

    node = Node.objects.get(pk=node_id)
    return node_clean(node=node, previous_state=previous_state).state
