"""Celery tasks of inventory: pruning the placement change log (thin: the service does the work)."""
from celery import shared_task


@shared_task(name="inventory.placement_changes_prune")
def placement_changes_prune():
    from .services import placement_changes_prune as prune

    return prune()
