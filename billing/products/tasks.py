"""Thin Celery tasks of the billing products (beat entries in config/settings/beat.py)."""
from celery import shared_task


@shared_task(name="billing.package_renewals")
def package_renewals_task():
    """Apply the renewal choice of every package period whose end passed."""
    from .packages import package_renewals_due

    return package_renewals_due()


@shared_task(name="billing.invoices_issue")
def invoices_issue_task():
    """Issue last month's invoices of postpaid organizations (idempotent; runs hourly)."""
    from .postpaid import invoices_issue_due

    return invoices_issue_due()


@shared_task(name="billing.invoices_settle")
def invoices_settle_task(org_id=None):
    """Mark invoices paid whose top-up landed (posting the sub-fen rounding once): every 5 minutes for all
    organizations, and at once for one whose top-up was just credited (billing.payments.events)."""
    from .postpaid import invoices_settle_due

    return invoices_settle_due(org_id=org_id)
