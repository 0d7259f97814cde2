"""Celery tasks: thin wrappers over webhooks.delivery."""
from celery import shared_task

from .delivery import deliveries_due, delivery_attempt


@shared_task(name="webhooks.deliver")
def deliver(delivery_id):
    return delivery_attempt(delivery_id)


@shared_task(name="webhooks.retry_due")
def retry_due():
    ids = deliveries_due()
    for delivery_id in ids:
        deliver.delay(str(delivery_id))
    return len(ids)
