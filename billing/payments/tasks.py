"""Thin Celery tasks for payments (registered through billing/tasks.py)."""
from celery import shared_task


@shared_task(name="billing.payments_reconcile")
def payments_reconcile_task():
    """Credit succeeded PaymentIntents whose webhook never came (beat, every STRIPE_RECONCILE_SECONDS)."""
    from .reconcile import payments_reconcile

    return payments_reconcile()
