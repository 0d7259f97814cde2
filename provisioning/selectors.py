"""Reads of instances, always scoped to an organization (another tenant's id → 404)."""
import uuid

from django.db.models import Prefetch, Q

from core.errors import NotFoundError
from inventory.models import CardAllocation

from .choices import InstanceState as S
from .models import Instance, InstanceEvent, NodeGroup, ReadinessReport


def _live_groups():
    return Prefetch("groups", queryset=NodeGroup.objects.filter(released_at__isnull=True)
                    .select_related("node__accelerator").order_by("item_index", "id"), to_attr="live_groups")


def instance_list(*, org, state: str | None = None):
    """The organization's instances, newest first, with their live node groups prefetched."""
    qs = Instance.objects.filter(organization=org).select_related("zone").prefetch_related(_live_groups())
    if state:
        qs = qs.filter(state__in=[s for s in state.split(",") if s])
    return qs.order_by("-created_at", "-id")


def instance_get(*, org, instance_id) -> Instance:
    """One instance of the organization, or 404 (also for malformed ids and other tenants)."""
    try:
        return instance_list(org=org).get(pk=uuid.UUID(str(instance_id)))
    except (Instance.DoesNotExist, ValueError):
        raise NotFoundError("No such instance.") from None


def instance_events(*, instance: Instance):
    """The state history, oldest first."""
    return InstanceEvent.objects.filter(instance=instance).order_by("created_at", "id")


def instance_reports(*, instance: Instance):
    """Readiness reports, in the order they ran."""
    return ReadinessReport.objects.filter(instance=instance).select_related("node").order_by("id")


def org_cards_in_use(*, org) -> int:
    """Cards with a live allocation held by the organization's instances (the quota's numerator)."""
    return CardAllocation.objects.filter(
        released_at__isnull=True, holder_id__in=Instance.objects.filter(organization=org).values("pk")).count()


def waitlist_positions(instances) -> dict:
    """{instance id: 1-based position} among waitlisted instances of the same shape (FIFO by waitlisted_at)."""
    waiting = [i for i in instances if i.state == S.WAITLISTED]
    if not waiting:
        return {}
    shapes = {waitlist_shape(i) for i in waiting}
    queue = (Instance.objects.filter(state=S.WAITLISTED)
             .filter(Q(kind__in={s[0] for s in shapes}))
             .order_by("waitlisted_at", "created_at", "id")
             .only("id", "kind", "items", "policy", "zone_id", "waitlisted_at"))
    counters: dict = {}
    positions: dict = {}
    for other in queue:
        shape = waitlist_shape(other)
        if shape in shapes:
            counters[shape] = counters.get(shape, 0) + 1
            positions[other.pk] = counters[shape]
    return {i.pk: positions.get(i.pk) for i in waiting}


def waitlist_shape(instance: Instance) -> tuple:
    """Kind, accelerators and counts, zone — or the policy (SPEC §3 first come, first served)."""
    if instance.items:
        mix = tuple(sorted((it["accelerator"], int(it["count"])) for it in instance.items))
    else:
        p = instance.policy or {}
        mix = ("policy", p.get("total_cards"), tuple(sorted(p.get("compatible_vendors", []))),
               p.get("min_domestic_share"))
    return (instance.kind, mix, str(instance.zone_id or ""))
