"""What the instance pages show beside the row itself: costs, waitlist positions, buttons, steps,
readiness bars and topology — each fetched once per page, never per row."""
from dataclasses import dataclass

from billing.models import Transfer
from core.dbclock import db_now
from provisioning import selectors
from provisioning.api.serializers import InstanceSerializer
from provisioning.choices import InstanceState as S
from provisioning.notices import instance_notices
from provisioning.services import billing_port

from ..catalog_names import accelerator_names
from ..state_reasons import reason_for_people

# Polling: fast while something is changing, slow while running (only the cost moves), none when settled.
POLL_FAST, POLL_RUNNING = "every 2s", "every 10s"
SETTLED = frozenset({S.TERMINATED, S.FAILED, S.STOPPED})
INTRA_NODE_FABRIC = {"nvidia": "NVLink / NVSwitch", "huawei": "HCCS"}
ACTIONS = (("stop", S.STOPPING, "Stop", ""), ("start", S.STARTING, "Start", "primary"),
           ("terminate", S.TERMINATING, "Terminate", "danger"))
STEPS = ((S.PROVISIONING, "Cards placed, machine being prepared"),
         (S.CHECKING, "Interconnect readiness test"),
         (S.RUNNING, "Running — billing started"))


def poll_trigger(instance) -> str:
    """The hx-trigger of an instance's live block ('' stops polling)."""
    if instance.state in SETTLED:
        return ""
    # A queue position or a running instance changes slowly (a waitlisted one may wait for hours).
    return POLL_RUNNING if instance.state in (S.RUNNING, S.WAITLISTED) else POLL_FAST


def decorate(instances, *, can_write: bool) -> list:
    """Attach .api (the API body: nodes, ssh, sla), .cost, .position, .actions, .may_start and .poll to each instance."""
    instances = list(instances)
    now = db_now()
    ids = [i.pk for i in instances]
    costs = billing_port.instance_costs(ids, now=now) if ids else {}
    context = {"costs": costs, "positions": selectors.waitlist_positions(instances), "now": now,
               "packages": billing_port.packages_current(instances), "notices": instance_notices(instances)}
    slugs = {it["accelerator"] for inst in instances for it in inst.items}
    names = accelerator_names(slugs) if slugs else {}
    for inst in instances:
        inst.api = InstanceSerializer(inst, context=context).data
        inst.cost = int(costs.get(inst.pk, 0) or 0)
        inst.position = context["positions"].get(inst.pk)
        inst.actions = [(name, label, style) for name, target, label, style in ACTIONS
                        if can_write and inst.can_become(target)]
        inst.may_start = can_write  # the console only suggests starting to a role that may
        inst.poll = poll_trigger(inst)
        inst.mix = [{"count": it["count"], "name": names.get(it["accelerator"], it["accelerator"])}
                    for it in inst.items]
    return instances


@dataclass
class Step:
    label: str
    status: str  # done | current | todo | failed
    at: object = None


def progress(instance, events) -> list[Step]:
    """The steps of the latest create/start request, from its events (done, current, still to come)."""
    start = 0
    for index, event in enumerate(events):
        if event.reason in ("create", "start requested"):
            start = index
    run = events[start:]
    reached = {}
    for event in run:
        reached.setdefault(event.to_state, event.created_at)
    first = run[0] if run else None
    steps = [Step("Start requested" if first and first.reason == "start requested" else "Request accepted",
                  "done", first.created_at if first else None)]
    if S.WAITLISTED in reached:
        steps.append(Step("Waiting for capacity (waitlist)",
                          "current" if instance.state == S.WAITLISTED else "done", reached[S.WAITLISTED]))
    for state, label in STEPS:
        if state in reached:
            status = "current" if instance.state == state and state != S.RUNNING else "done"
            steps.append(Step(label, status, reached[state]))
        else:
            steps.append(Step(label, "todo"))
    if instance.state == S.FAILED:
        why = reason_for_people(instance.state_reason, instance.kind)
        steps.append(Step(f"Failed: {why}" if why else "Failed", "failed", reached.get(S.FAILED)))
    return steps


def readiness_rows(reports) -> list:
    """Reports with the geometry of a small bus-bandwidth bar: busbw against the floor (200 px wide)."""
    rows = []
    for r in reports:
        busbw, floor = r.busbw_largest_gbps or 0.0, r.floor_gbps or 0.0
        scale = max(busbw, floor, 1.0) * 1.1
        r.bar_width = round(busbw / scale * 200, 1)
        r.floor_x = round(floor / scale * 200, 1)
        rows.append(r)
    return rows


def compensation_for(events) -> int:
    """µCNY of SLA compensation credited for the breaches of this instance's create/start requests."""
    refs = [str(e.pk) for e in events if e.reason in ("create", "start requested")]
    if not refs:
        return 0
    return sum(Transfer.objects.filter(code="sla", grant_ref__in=refs).values_list("amount", flat=True))


def topology_groups(instance):
    """The live node groups with node → zone and accelerator (one query)."""
    from provisioning.models import NodeGroup

    return list(NodeGroup.objects.filter(instance=instance, released_at__isnull=True)
                .select_related("node__zone", "node__accelerator").order_by("item_index", "id"))


def topology(groups) -> list[str]:
    """Plain-language topology of the placed groups: the fabric inside each node and across nodes."""
    lines = []
    by_item: dict = {}
    for g in groups:
        by_item.setdefault(g.item_index, []).append(g)
    vendors = {}
    for _index, item_groups in sorted(by_item.items()):
        node = item_groups[0].node
        vendor = node.accelerator.vendor
        vendors[vendor] = True
        cards = sum(len(g.card_indices) for g in item_groups)
        hosts = len({g.node_id for g in item_groups})
        inside = INTRA_NODE_FABRIC.get(vendor, "PCIe")
        text = f"{cards} × {node.accelerator.name} on {hosts} node{'s' if hosts > 1 else ''}: {inside} inside a node"
        if hosts > 1:
            text += f"; {fabric(node.zone)} across nodes"
        lines.append(text)
    if len(vendors) > 1 and groups:
        lines.append(f"The vendors' parts talk over the zone's {fabric(groups[0].node.zone)} fabric.")
    return lines


def fabric(zone) -> str:
    kind = "InfiniBand" if zone.fabric_kind == "infiniband" else "RoCE v2"
    return f"{kind} {zone.fabric_gbps} Gbps"
