"""Reads of instances, always scoped to an organization (another tenant's id → 404)."""
import uuid

from django.contrib.postgres.expressions import ArraySubquery
from django.db import connection
from django.db.models import F, JSONField, OuterRef, Prefetch, Q, Value
from django.db.models.functions import JSONObject

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


# The columns the API's instance body shows, in provisioning.api.rows.InstanceRow order; GROUP_BODY_FIELDS in
# GroupRow order (the live node groups, fetched with the page as one JSON array per instance).
INSTANCE_BODY_COLUMNS = (
    "id", "name", "kind", "state", "state_reason", "items", "policy", "zone_id", "zone__slug", "image", "images",
    "billing", "package_renewal", "waitlist", "created_at", "ready_at", "price_per_hour", "sla_deadline",
    "sla_event_id", "sla_settled_event_id", "sla_compensation", "body_cost", "body_groups")
GROUP_BODY_FIELDS = {"i": "item_index", "a": "accelerator", "c": "card_indices", "s": "state", "n": "node_id",
                     "h": "node__hostname", "sh": "node__ssh_host", "sp": "node__ssh_port",
                     "cc": "node__card_count", "v": "node__accelerator__vendor"}


def instance_list_rows(*, org, state: str | None = None):
    """instance_list as tuples of INSTANCE_BODY_COLUMNS: only the columns the API body shows, the zone
    joined, the µCNY charged so far and the live node groups (by item index, id) read in the same statement,
    so the page, its costs and its groups are one consistent snapshot and no model objects are built."""
    from billing.selectors import instance_cost_expression

    qs = Instance.objects.filter(organization=org)
    if state:
        qs = qs.filter(state__in=[s for s in state.split(",") if s])
    if connection.vendor == "postgresql":
        groups = ArraySubquery(NodeGroup.objects.filter(instance_id=OuterRef("pk"), released_at__isnull=True)
                               .order_by("item_index", "id").values(j=JSONObject(**GROUP_BODY_FIELDS)))
    else:  # SQLite (development without PostgreSQL): the view reads them with live_group_rows
        groups = Value(None, output_field=JSONField())
    return (qs.order_by("-created_at", "-id")
            .annotate(body_cost=instance_cost_expression(OuterRef("pk")), body_groups=groups)
            .values_list(*INSTANCE_BODY_COLUMNS))


def live_group_rows(instance_ids) -> dict:
    """{instance id: [dicts of GROUP_BODY_FIELDS]} of the live node groups, by item index, in one query."""
    by_instance: dict = {i: [] for i in instance_ids}
    rows = (NodeGroup.objects.filter(instance_id__in=list(by_instance), released_at__isnull=True)
            .order_by("item_index", "id").values("instance_id", **{k: F(v) for k, v in GROUP_BODY_FIELDS.items()}))
    for row in rows:
        by_instance[row.pop("instance_id")].append(row)
    return by_instance


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
