"""The ledger's auto-stop hook (SPEC §4): stop an organization's on-demand instances at the exhaustion second.

Billing has already capped every open meter at that second (`billable_until_seconds`) and written
off what it could not charge; the stop closes the meters at that second. A stop due in the future
is scheduled for that second (never closing a meter ahead of time), so the customer keeps what the
funds pay for.
"""
from core.dbclock import db_now

from .instances import instances_autostop


def autostop_schedule(*, org_id, at=None, reason: str = "funds_exhausted") -> list:
    """Stop now when `at` has passed (returns the stopped ids), else schedule the stop for `at` (returns [])."""
    from ..tasks import instances_autostop_task

    delay = (at - db_now()).total_seconds() if at is not None else 0
    if delay > 0:
        instances_autostop_task.apply_async(kwargs={"org_id": str(org_id), "at": at.isoformat(), "reason": reason},
                                            countdown=delay)
        return []
    return instances_autostop(org_id=org_id, at=at, reason=reason)
