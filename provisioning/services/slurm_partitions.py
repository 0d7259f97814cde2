"""A hybrid's Slurm partition over the lifecycle: made when it goes running, removed when its nodes are released,
and reconciled against the controller on every reconciler pass.

Only hybrids that own their nodes get one (bare metal, or containers taking every card of their nodes): a
partition covers whole nodes, so one over a shared node would let this tenant's jobs onto another's cards.

A failure never holds the instance back, but it is not only logged: the instance's `state_reason` becomes
`slurm_partition_failed: <create|delete> hybrid-…: <scontrol's answer>` (the API shows it, the console says it in
words) and the creator gets one email per episode. The next reconciler pass tries again; once the controller
matches, the reason goes back to that of the instance's latest event.
"""
import logging

from django.conf import settings
from django.utils.translation import gettext

from core.mail import send_to_people
from tenancy.selectors import members_to_tell

from ..choices import InstanceState as S
from ..models import Instance, InstanceEvent, NodeGroup
from . import hardware_port

logger = logging.getLogger("cardmix.provisioning")

SLURM_FAILURE = "slurm_partition_failed"
# Where a failed delete is shown: the states an instance rests in once its nodes are released. (Stopping and
# terminating end in one of them, whose transition writes its own reason; the next pass marks it then.)
RELEASED_STATES = (S.STOPPED, S.TERMINATED, S.FAILED)


def _first_line(output: str) -> str:
    return next((line.strip() for line in output.splitlines() if line.strip()), "no output")


def _recipients(instance: Instance) -> list:
    """The instance's creator; the organization's owners and admins when it has none (a deleted user)."""
    if instance.creator_id and instance.creator.email:
        return [instance.creator]
    return members_to_tell(org_id=instance.organization_id, roles=["owner", "admin"])


def _notify(instance: Instance, operation: str, name: str) -> None:
    url = f"{settings.SITE_URL}/instances/{instance.pk}/"
    values = {"instance": instance.name, "id": instance.pk, "partition": name, "url": url}

    def render():
        if operation == "create":
            return (gettext("Cardmix: the Slurm partition of %(instance)s could not be created") % values,
                    gettext("Your instance %(instance)s (%(id)s) is running, but its Slurm partition %(partition)s "
                            "could not be created, so jobs cannot be submitted to it yet. Cardmix tries again "
                            "automatically; the instance page shows the partition once it is there: %(url)s") % values)
        return (gettext("Cardmix: the Slurm partition of %(instance)s could not be removed") % values,
                gettext("The nodes of your instance %(instance)s (%(id)s) were released, but its Slurm partition "
                        "%(partition)s could not be removed yet. Cardmix tries again automatically; nothing is charged "
                        "for it. Instance: %(url)s") % values)

    send_to_people(_recipients(instance), render)


def _failed(instance_id, *, operation: str, output: str, states) -> bool:
    """Mark the instance (while in `states`) and email its creator once per episode; True if newly marked."""
    name = hardware_port.slurm_partition_name(instance_id)
    reason = f"{SLURM_FAILURE}: {operation} {name}: {_first_line(output)}"[:300]
    logger.warning("slurm partition failed", extra={"instance": str(instance_id), "operation": operation,
                                                    "out": output[-2000:]})
    # Conditional on the state: a transition meanwhile wrote its own reason, which stands.
    marked = (Instance.objects.filter(pk=instance_id, state__in=states)
              .exclude(state_reason__startswith=SLURM_FAILURE).update(state_reason=reason))
    if marked:
        _notify(Instance.objects.select_related("creator").get(pk=instance_id), operation, name)
    return bool(marked)


def _recovered(instance_id, *, state: str) -> None:
    """The controller matches again: the reason goes back to the latest event's (only over our own mark)."""
    reason = (InstanceEvent.objects.filter(instance_id=instance_id).order_by("-created_at", "-id")
              .values_list("reason", flat=True).first() or "")
    Instance.objects.filter(pk=instance_id, state=state, state_reason__startswith=SLURM_FAILURE).update(
        state_reason=reason)


def _live_parts(instance_id) -> list:
    groups = NodeGroup.objects.live().filter(instance_id=instance_id).select_related(
        "node__accelerator")
    return hardware_port.slurm_parts(groups)


def partition_open(*, instance: Instance, groups) -> bool | None:
    """Create the partition of a hybrid that just went running (None: it gets none; else whether it was made)."""
    parts = hardware_port.slurm_parts(groups)
    if not hardware_port.slurm_wanted(kind=instance.kind, parts=parts):
        return None
    result = hardware_port.slurm_partition_create(instance_id=instance.pk, organization_id=instance.organization_id,
                                                  parts=parts)
    if not result.ok:
        _failed(instance.pk, operation="create", output=result.output, states=[S.RUNNING])
        return False
    _recovered(instance.pk, state=S.RUNNING)
    return True


def partition_close(*, instance: Instance, groups) -> bool | None:
    """Remove a hybrid's partition as its nodes are released (None: Slurm off or no hybrid). A failure is left to
    the reconciler's pass, which shows it on the instance once it rests (stopped, terminated, failed)."""
    parts = hardware_port.slurm_parts(groups)
    # Every hybrid, not only those that own their nodes: a partition made before that rule must go as well.
    if not hardware_port.slurm_enabled() or len({p.vendor for p in parts}) < 2:
        return None
    result = hardware_port.slurm_partition_delete(instance_id=instance.pk)
    if not result.ok:
        logger.warning("slurm partition delete failed; the reconciler retries",
                       extra={"instance": str(instance.pk), "out": result.output[-2000:]})
    return result.ok


def _wanted() -> dict:
    """{partition name: (instance id, organization id, parts)} of every running hybrid that owns its nodes."""
    by_instance: dict = {}
    rows = (NodeGroup.objects.live().filter(instance__state=S.RUNNING)
            .values_list("instance_id", "instance__kind", "instance__organization_id", "node__hostname",
                         "node__card_count", "node__accelerator__vendor", "card_indices"))
    for instance_id, kind, org_id, hostname, card_count, vendor, cards in rows:
        entry = by_instance.setdefault(instance_id, (kind, org_id, []))
        entry[2].append(hardware_port.SlurmPart(hostname, card_count, vendor, len(cards)))
    return {hardware_port.slurm_partition_name(pk): (pk, org_id, parts)
            for pk, (kind, org_id, parts) in by_instance.items()
            if hardware_port.slurm_wanted(kind=kind, parts=parts)}


def partitions_reconcile() -> dict:
    """One pass: create or fix (AllowAccounts) the partition of every running hybrid that owns its nodes, delete
    Cardmix's partitions no such instance wants, mark what failed and clear the marks that no longer hold.

    The controller is read before the database: a partition made after the listing is never taken for a leftover.
    (One made by a worker for an instance that stops during the pass is deleted by the next pass.)
    """
    if not hardware_port.slurm_enabled():
        return {}
    listing, listed = hardware_port.slurm_partitions_listed()
    if not listing.ok:  # the controller cannot be read: nothing is known, so nothing is changed
        logger.warning("slurm: partitions not listed", extra={"out": listing.output[-2000:]})
        return {"slurm_unreadable": 1}
    wanted = _wanted()
    stats = {"slurm_created": 0, "slurm_deleted": 0, "slurm_failed": 0}
    present = set(listed) - set(wanted)  # + each wanted one once it is there with the right account
    for name, (instance_id, org_id, parts) in wanted.items():
        if listed.get(name, {}).get("AllowAccounts") == hardware_port.slurm_account(org_id):
            present.add(name)
            continue
        result = hardware_port.slurm_partition_create(instance_id=instance_id, organization_id=org_id, parts=parts)
        if result.ok:
            stats["slurm_created"] += 1
            present.add(name)
        else:
            stats["slurm_failed"] += 1
            _failed(instance_id, operation="create", output=result.output, states=[S.RUNNING])
    for name in sorted(set(listed) - set(wanted)):
        # The name holds the first 8 hex digits of the instance id (the first hyphen comes after them).
        short_id = name.removeprefix("hybrid-")
        result = hardware_port.slurm_partition_delete(instance_id=short_id)
        owners = Instance.objects.filter(id__startswith=short_id).values_list("pk", "state")
        if result.ok:
            stats["slurm_deleted"] += 1
            present.discard(name)
            for pk, state in owners:  # a terminated one too (the scan below leaves those out)
                _recovered(pk, state=state)
            continue
        stats["slurm_failed"] += 1
        for pk, _state in owners:
            _failed(pk, operation="delete", output=result.output, states=RELEASED_STATES)
    # By state, which is indexed: terminated instances, the bulk of the table, are cleared by the loop above.
    marked = Instance.objects.filter(state__in=[S.RUNNING, S.STOPPED, S.FAILED],
                                     state_reason__startswith=SLURM_FAILURE).values_list("pk", "state")
    for pk, state in marked:
        name = hardware_port.slurm_partition_name(pk)
        if (name in present) == (name in wanted):  # running and made, or released and gone
            _recovered(pk, state=state)
    return {k: v for k, v in stats.items() if v}
