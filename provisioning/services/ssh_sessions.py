"""The audit trail of the SSH gateway: one row when a session to an instance opens (who, which key, from where)
and one when it ends (how long, and why: the client left, or its key or membership was revoked)."""
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils.translation import gettext

from tenancy.audit import audit_record

from ..models import Instance


def _audit(*, action, user_id, instance_id, org_id, ip, details):
    instance = Instance.objects.select_related("organization").filter(pk=instance_id, organization_id=org_id).first()
    if instance is None:  # deleted meanwhile: nothing of its organization's to record against
        return None
    actor = get_user_model().objects.filter(pk=user_id).first()
    with transaction.atomic():
        return audit_record(action=action, org=instance.organization, actor=actor, target=instance, ip=ip,
                            details={"via": "ssh-gateway", **details})


def ssh_session_opened(*, user_id, instance_id, org_id, ip, port, fingerprint, form):
    """A member's session to the instance began (form: "user" for `ssh <id>@gateway`, "jump" for `ssh -J`)."""
    return _audit(action="instance.ssh_open", user_id=user_id, instance_id=instance_id, org_id=org_id, ip=ip,
                  details={"from": gettext('%(ip)s:%(port)s') % {'ip': ip, 'port': port}, "key": fingerprint, "form": form})


def ssh_session_closed(*, user_id, instance_id, org_id, ip, port, fingerprint, seconds: int, reason: str):
    """It ended after `seconds`; `reason` is "closed" when the client left."""
    return _audit(action="instance.ssh_close", user_id=user_id, instance_id=instance_id, org_id=org_id, ip=ip,
                  details={"from": gettext('%(ip)s:%(port)s') % {'ip': ip, 'port': port}, "key": fingerprint, "seconds": seconds, "reason": reason})
