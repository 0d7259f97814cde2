"""Deadlines a transition stores on the instance row (SPEC §3: compared with the database clock later).

Kept free of other service imports: instance_transition calls it for every state change.
"""
from datetime import timedelta

from django.conf import settings

from ..choices import InstanceState as S


def transition_defaults(to: str, now) -> dict:
    """Fields every transition into `to` resets: the waiting state's expiry and the reconciler's retries."""
    expires_at = None
    if to == S.WAITLISTED:
        expires_at = now + timedelta(hours=settings.WAITLIST_EXPIRY_HOURS)
    elif to == S.STOPPED:
        expires_at = now + timedelta(days=settings.STOPPED_RETENTION_DAYS)
    return {"expires_at": expires_at, "step_retries": 0}
