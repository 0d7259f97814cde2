"""Resting instances past their stored deadline (`expires_at`, set by the transition into the state):

- waitlisted longer than WAITLIST_EXPIRY_HOURS → terminating with reason `waitlist_expired`;
- stopped longer than STOPPED_RETENTION_DAYS → terminating with reason `retention_expired`, with a
  notice email to the organization's owners and admins (and the creator) and an audit event.

The worker then finishes the termination (terminated). A stop kept nothing (provisioning/stop_keeps.py), so
there is no disk left to free.
"""
import logging

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction

from core.dbclock import db_now
from tenancy.audit import audit_record
from tenancy.models import Membership

from ..choices import InstanceState as S
from ..lock_objects import instance_lock
from ..models import Instance
from ..stop_keeps import stop_keeps
from .instances import instance_dispatch, step_deadline
from .transitions import instance_transition

logger = logging.getLogger("cardmix.provisioning")

REASONS = {S.WAITLISTED: "waitlist_expired", S.STOPPED: "retention_expired"}
BATCH = 500


def _notice_recipients(instance: Instance) -> list[str]:
    emails = set(Membership.objects.filter(organization_id=instance.organization_id, role__in=["owner", "admin"])
                 .values_list("user__email", flat=True))
    if instance.creator_id:
        emails.add(instance.creator.email)
    return sorted(e for e in emails if e)


def _notice(instance: Instance) -> None:
    """Email the organization that a stopped instance was terminated after its retention period."""
    to = _notice_recipients(instance)
    if not to:
        return
    days = settings.STOPPED_RETENTION_DAYS
    subject = f"Cardmix: stopped instance {instance.name} was terminated"
    # Nothing was kept while it was stopped (its stop deleted the container's disk or wiped its nodes).
    body = (f"Your instance {instance.name} ({instance.pk}) was stopped for more than {days} days and has now "
            f"been terminated. Nothing of it was left: {stop_keeps(instance.kind)} "
            f"Instances: {settings.SITE_URL}/instances/")
    transaction.on_commit(lambda: send_mail(subject, body, None, to, fail_silently=True))


def instance_expire(*, instance_id) -> bool:
    """Terminate one waitlisted or stopped instance whose expiry passed (by the database clock)."""
    with transaction.atomic():
        instance = instance_lock(instance_id=instance_id)
        now = db_now()
        reason = REASONS.get(instance.state)
        if reason is None or instance.expires_at is None or instance.expires_at > now:
            return False
        came_from, expired_at = instance.state, instance.expires_at
        instance_transition(instance=instance, to=S.TERMINATING, reason=reason,
                            step_deadline=step_deadline(instance, now))
        audit_record(action=f"instance.{reason}", org=instance.organization, target=instance,
                     details={"from": came_from, "expires_at": expired_at.isoformat()})
        if came_from == S.STOPPED:
            _notice(instance)
        instance_dispatch(instance.pk)
    logger.info("instance expired", extra={"instance": str(instance_id), "reason": reason})
    return True


def instances_expire_due(*, limit: int = BATCH) -> int:
    """Expire every waitlisted or stopped instance past its stored deadline (beat); returns how many."""
    ids = list(Instance.objects.filter(state__in=list(REASONS), expires_at__lte=db_now())
               .order_by("expires_at").values_list("pk", flat=True)[:limit])
    return sum(1 for pk in ids if instance_expire(instance_id=pk))
