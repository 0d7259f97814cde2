"""A node group that failed readiness twice: re-test its cards once, and place the group again (SPEC §3).

The group's cards are released and held out of the pool for their second pass (services/retest.py:
passing returns them, failing quarantines the node with both reports, for operators), and — while the
SLA window is open and the instance has been re-placed fewer
than MAX_REPLACEMENTS times — the same cards-per-node of the same accelerator are placed on another
node of the same zone (so hybrids stay in one zone and bare-metal clusters on one fabric). The
instance goes back to `provisioning`; the worker prepares and checks just the new group.
"""
import logging

from django.db import transaction
from django.db.models import Max

from core.dbclock import db_now
from inventory.services import cards_release
from tenancy.audit import audit_record

from ..choices import GroupState, RetestCause
from ..choices import InstanceState as S
from ..lock_objects import instance_lock
from ..models import Instance, NodeGroup, ReadinessReport
from ..placement import Item, PlacementRequest
from .capacity import placement_catalog
from .claims import placement_claim
from .fleet import driver_for, driver_touched, node_ref, release_cards
from .instances import instance_dispatch, step_deadline
from .retest import retest_begin
from .transitions import instance_transition

logger = logging.getLogger("cardmix.provisioning")

MAX_REPLACEMENTS = 2  # SPEC §3: at most 2 re-placements per instance


def _node_release(instance: Instance, group: NodeGroup) -> None:
    """Stop the container / power the node off before leaving it (best effort: the node is suspect)."""
    if not driver_touched(group):
        return
    node = group.node
    try:
        driver_for(node).release(node_ref(node), release_cards(instance, group), instance_id=str(instance.pk))
    except Exception:  # a failing node must not block moving the instance elsewhere
        logger.exception("release on a quarantined node failed", extra={"node": node.hostname})


def _second_pass_begin(*, instance: Instance, group: NodeGroup) -> None:
    """Hold the group's cards out of the pool and re-test them once (services/retest.py) instead of quarantining
    the node at once: passing returns them, failing quarantines the node with both reports."""
    first = ReadinessReport.objects.filter(group=group, passed=False).order_by("-id").first()
    retest_begin(instance=instance, group=group, cause=RetestCause.READINESS_FAILED, card_ids=group.card_ids,
                 card_indices=group.card_indices, first_report=first)


def _place_again(instance: Instance, group: NodeGroup) -> bool:
    """Claim the group's cards-per-node again in its zone (the failed cards, held for their second pass, take nothing new)."""
    catalog = placement_catalog(billing=instance.billing)
    if group.accelerator not in catalog:
        return False
    request = PlacementRequest(kind=instance.kind, items=(Item(group.accelerator, len(group.card_indices)),),
                               zone=group.node.zone.slug)
    last = NodeGroup.objects.filter(instance=instance).aggregate(m=Max("pk"))["m"] or 0
    with transaction.atomic():
        result = placement_claim(instance=instance, request=request, catalog=catalog)
        if not result.ok:
            return False
        # The claim numbers items within its own one-item request; they belong to the failed group's item.
        NodeGroup.objects.filter(instance=instance, pk__gt=last).update(item_index=group.item_index)
    return True


def group_replace(*, instance: Instance, group: NodeGroup, reason: str) -> bool:
    """Quarantine a group's node after its second readiness failure and re-place the group if allowed.

    True when the instance was re-placed (state provisioning again). False when the caller must fail
    it: an inter-node or boot failure (no single node to blame; nothing quarantined), no re-placement
    left, the SLA window closed, or no capacity.
    """
    if group.prepared_at is None or group.state == GroupState.CHECKED:
        return False  # boot failure (maybe the image) or inter-node failure: not this node's fault alone
    _node_release(instance, group)
    with transaction.atomic():
        locked = instance_lock(instance_id=instance.pk)
        if locked.state not in (S.PROVISIONING, S.CHECKING):
            return False
        live = NodeGroup.objects.select_for_update().live().filter(pk=group.pk).first()
        if live is None:
            return False
        _second_pass_begin(instance=locked, group=group)
        cards_release(holder_id=locked.pk, card_ids=group.card_ids)
        now = db_now()
        NodeGroup.objects.filter(pk=group.pk).update(state=GroupState.FAILED, released_at=now)
        window_open = locked.sla_deadline is None or now < locked.sla_deadline
        if locked.replacements >= MAX_REPLACEMENTS or not window_open or not _place_again(locked, group):
            # Quarantine and release stay committed; the caller fails the instance and frees the rest.
            return False
        came_from = locked.state
        live_groups = NodeGroup.objects.live().filter(instance=locked)
        if live_groups.count() >= 2:
            # A cluster: the new part changes the hostfile (and maybe every part's rank), so every part is prepared
            # again with the new plan, and checked again (services/cluster.py).
            live_groups.filter(prepared_at__isnull=False).update(prepared_at=None, state=GroupState.PLACED,
                                                                 prepare_attempts=0, check_attempts=0)
        instance_transition(instance=locked, to=S.PROVISIONING,
                            reason=f"re-placed: {group.node.hostname} failed readiness",
                            replacements=locked.replacements + 1, step_deadline=step_deadline(locked, now))
        audit_record(action="instance.replace", org=locked.organization, target=locked,
                     details={"node": group.node.hostname, "reason": reason[:300],
                              "replacements": locked.replacements})
        if came_from == S.PROVISIONING:
            instance_dispatch(locked.pk)  # the running task stops at a self-transition; a fresh one picks it up
    return True
