"""Celery tasks of storage: the retention sweep (thin: the service does the work)."""
from celery import shared_task


@shared_task(name="storage.volumes_retention")
def volumes_retention():
    from .retention import volumes_retention_sweep

    return volumes_retention_sweep()


@shared_task(name="storage.volumes_usage_simulate")
def volumes_usage_simulate():
    from .simulated import volumes_usage_simulate as simulate

    return simulate()
