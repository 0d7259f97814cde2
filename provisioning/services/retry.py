"""Retry a failed instance as a new one with the same request (SPEC §3: `failed` only goes on to `terminating`).

The transition table gives a failed instance no way back to provisioning, and the SLA window, its breach and its
compensation belong to that request; so a retry is a new create through instance_create (quota, funds, placement,
a fresh SLA window), and the failed row stays as it is until the customer terminates it. A retry is recorded in
the audit log against the failed instance, under its row lock, so a second press (another tab, a double click)
answers the instance the first one created instead of creating another."""
from django.db import transaction
from django.utils.translation import gettext

from core.errors import InvalidState
from tenancy.audit import audit_record
from tenancy.models import AuditEvent
from tenancy.selectors import ssh_keys_by_ids

from ..choices import InstanceState as S
from ..lock_objects import instance_lock
from ..models import Instance
from ..placement import Item, Policy
from .instances import instance_create
from .specs import InstanceSpec

RETRY_ACTION = "instance.retry"
RETRY_SUFFIX = " (retry)"
NAME_MAX = 100


def retry_spec(instance: Instance) -> InstanceSpec:
    """The failed instance's request as it was made: its policy when it gave one, else its card mix."""
    policy = instance.policy
    return InstanceSpec(
        kind=instance.kind,
        items=() if policy else tuple(Item(it["accelerator"], int(it["count"])) for it in instance.items),
        policy=Policy(policy["total_cards"], tuple(policy["compatible_vendors"]),
                      float(policy.get("min_domestic_share") or 0.0)) if policy else None,
        zone=instance.zone.slug if instance.zone_id else None,
        image=instance.image, images=dict(instance.images or {}), billing=instance.billing)


def retry_name(name: str) -> str:
    """"train-1" → "train-1 (retry)", within the name's 100 characters."""
    return name[:NAME_MAX - len(RETRY_SUFFIX)] + RETRY_SUFFIX


def retry_of(instance: Instance) -> Instance | None:
    """The instance a retry of `instance` created, if any (same organization)."""
    event = (AuditEvent.objects.filter(organization_id=instance.organization_id, action=RETRY_ACTION,
                                       target_id=str(instance.pk)).order_by("created_at").first())
    new_id = (event.details or {}).get("new_instance") if event else None
    return Instance.objects.filter(organization_id=instance.organization_id, pk=new_id).first() if new_id else None


def instance_retry(*, org, instance_id, actor, request=None) -> Instance:
    """failed → a new instance with the same request (the actor's own keys among the failed one's); 409
    invalid_state for any other state; once per failed instance (a repeat answers the first retry)."""
    with transaction.atomic():
        failed = instance_lock(instance_id=instance_id, org=org)
        if failed.state != S.FAILED:
            raise InvalidState(gettext('Only a failed instance can be retried; this one is %(state)s.') % {'state': failed.state})
        earlier = retry_of(failed)
        if earlier is not None:
            return earlier
        keys = [str(k) for k in failed.ssh_key_ids or ()]
        if keys:
            own = {str(k.pk) for k in ssh_keys_by_ids(user=actor, ids=keys)}
            keys = [k for k in keys if k in own]  # another member's keys are theirs to use, not the retrier's
        instance = instance_create(org=org, actor=actor, spec=retry_spec(failed), name=retry_name(failed.name),
                                   ssh_key_ids=keys, waitlist=failed.waitlist,
                                   package_renewal=failed.package_renewal, request=request)
        audit_record(action=RETRY_ACTION, org=org, actor=actor, target=failed, request=request,
                     details={"new_instance": str(instance.pk)})
    return instance
