"""The ledger's auto-stop hook (SPEC §4): stop an organization's on-demand instances at the exhaustion second.

Billing has already capped every open meter at that second (`billable_until_seconds`), so the stop
itself closes the meters at the actual stop: seconds up to the exhaustion second are charged, any
later ones become write-offs. A stop due in the future is scheduled for that second, so the
customer keeps what the funds pay for.
"""
from core.dbclock import db_now

from .instances import instances_autostop


def autostop_schedule(*, org_id, at=None, reason: str = "funds_exhausted") -> list:
    """Stop now when `at` has passed (returns the stopped ids), else schedule the stop for `at` (returns [])."""
    from ..tasks import instances_autostop_task

    delay = (at - db_now()).total_seconds() if at is not None else 0
    if delay > 0:
        instances_autostop_task.apply_async(kwargs={"org_id": str(org_id), "reason": reason}, countdown=delay)
        return []
    return instances_autostop(org_id=org_id, at=None, reason=reason)
