"""Thin Celery tasks: the meter tick, trial expiry, ledger verification."""
from celery import shared_task


@shared_task(name="billing.meter_tick")
def meter_tick_task():
    """Post every open meter (beat, every METER_TICK_SECONDS)."""
    from .tick import meter_tick

    return meter_tick()


@shared_task(name="billing.trial_expiry")
def trial_expiry_task():
    """Expire the trial credit of organizations whose deadline passed."""
    from .credits import trial_expire_due

    return trial_expire_due()


@shared_task(name="billing.verify_ledger")
def verify_ledger_task():
    """Recompute balances from transfers; log and return the differences."""
    from .verify import ledger_verify_locked

    problems = ledger_verify_locked()
    return None if problems is None else len(problems)


from .payments.tasks import payments_reconcile_task  # noqa: E402,F401  (payments)
from .products.tasks import invoices_issue_task, invoices_settle_task, package_renewals_task  # noqa: E402,F401  (products)
