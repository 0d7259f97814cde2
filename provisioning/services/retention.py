"""Resting instances past their stored deadline (`expires_at`, set by the transition into the state):

- waitlisted longer than WAITLIST_EXPIRY_HOURS → terminating with reason `waitlist_expired`;
- stopped longer than STOPPED_RETENTION_DAYS → terminating with reason `retention_expired`, with a
  notice email to the organization's owners and admins (and the creator) and an audit event.

The worker then finishes the termination (terminated). A stop kept nothing (provisioning/stop_keeps.py), so
there is no disk left to free.
"""
import logging

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext

from core.dbclock import db_now
from core.mail import send_to_people
from tenancy.audit import audit_record
from tenancy.selectors import members_to_tell

from ..choices import InstanceState as S
from ..lock_objects import instance_lock
from ..models import Instance
from ..stop_keeps import stop_keeps
from .instances import instance_dispatch, step_deadline
from .transitions import instance_transition

logger = logging.getLogger("cardmix.provisioning")

REASONS = {S.WAITLISTED: "waitlist_expired", S.STOPPED: "retention_expired"}
BATCH = 500


def _notice_recipients(instance: Instance) -> list:
    """The organization's owners and admins and the instance's creator, with their languages."""
    people = members_to_tell(org_id=instance.organization_id, roles=["owner", "admin"])
    if instance.creator_id:
        people.append((instance.creator.email, instance.creator.language))
    return people


def _notice(instance: Instance) -> None:
    """Email the organization that a stopped instance was terminated after its retention period."""
    days = settings.STOPPED_RETENTION_DAYS
    # Nothing was kept while it was stopped (its stop deleted the container's disk or wiped its nodes).
    send_to_people(_notice_recipients(instance), lambda: (
        gettext("Cardmix: stopped instance %(name)s was terminated") % {"name": instance.name},
        gettext("Your instance %(name)s (%(id)s) was stopped for more than %(days)s days and has now been "
                "terminated. Nothing of it was left: %(stop_keeps)s Instances: %(url)s") % {
            "name": instance.name, "id": instance.pk, "days": days, "stop_keeps": stop_keeps(instance.kind),
            "url": f"{settings.SITE_URL}/instances/"}))


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
