"""What the instance pages show beside the row itself: costs, waitlist positions, buttons, steps,
readiness bars and topology — each fetched once per page, never per row."""
from dataclasses import dataclass

from django.utils.translation import gettext, gettext_lazy, ngettext

from billing.selectors import sla_compensation_total
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
INTRA_NODE_FABRIC = {"nvidia": gettext_lazy("NVLink / NVSwitch"), "huawei": "HCCS"}
ACTIONS = (("stop", S.STOPPING, gettext_lazy("Stop"), ""), ("start", S.STARTING, gettext_lazy("Start"), "primary"),
           ("terminate", S.TERMINATING, gettext_lazy("Terminate"), "danger"))
STEPS = ((S.PROVISIONING, gettext_lazy("Cards placed, machine being prepared")),
         (S.CHECKING, gettext_lazy("Interconnect readiness test")),
         (S.RUNNING, gettext_lazy("Running — billing started")))


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
        if inst.state == S.WAITLISTED:  # terminating a waiting request only takes it out of the queue
            inst.actions = [(n, gettext("Leave the waitlist") if n == "terminate" else label, style)
                            for n, label, style in inst.actions]
        if can_write and inst.state == S.FAILED:  # not a transition: a new instance with the same request
            inst.actions.insert(0, ("retry", gettext("Retry as a new instance"), "primary"))
        inst.may_start = can_write  # the console only suggests starting to a role that may
        # The API lists a group's endpoint until the group is released; a machine being stopped or torn down is
        # no longer one to log into, so the console offers no command for it.
        inst.ssh = [] if inst.state in NO_CONNECT else inst.api["ssh"]
        inst.ssh_gateway = None if inst.state in NO_CONNECT else inst.api["ssh_gateway"]
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
    steps = [Step(gettext("Start requested") if first and first.reason == "start requested" else gettext("Request accepted"),
                  "done", first.created_at if first else None)]
    if S.WAITLISTED in reached:
        steps.append(Step(gettext("Waiting for capacity (waitlist)"),
                          "current" if instance.state == S.WAITLISTED else "done", reached[S.WAITLISTED]))
    for state, label in STEPS:
        if state in reached:
            status = "current" if instance.state == state and state != S.RUNNING else "done"
            steps.append(Step(label, status, reached[state]))
        else:
            steps.append(Step(label, "todo"))
    if instance.state == S.FAILED:
        why = reason_for_people(instance.state_reason, instance.kind)
        steps.append(Step(gettext('Failed: %(why)s') % {'why': why} if why else gettext("Failed"), "failed", reached.get(S.FAILED)))
    ended = ENDED.get(instance.state)
    if ended:
        # Stopped or terminated since: the hand-over steps are history, not what the instance is now.
        for step in steps:
            if step.status in ("done", "current"):
                step.status = "past"
        requested, final = ended
        after = [e for e in run if e.to_state in (requested, final)]
        at = {e.to_state: e.created_at for e in after}
        steps.append(Step(STEP_LABELS[requested], "done", at.get(requested)))
        steps.append(Step(STEP_LABELS[final], "done" if instance.state == final else "current", at.get(final)))
    return steps


# A stop or termination after the hand-over: (requested state, final state) by current state.
ENDED = {S.STOPPING: (S.STOPPING, S.STOPPED), S.STOPPED: (S.STOPPING, S.STOPPED),
         S.TERMINATING: (S.TERMINATING, S.TERMINATED), S.TERMINATED: (S.TERMINATING, S.TERMINATED)}
STEP_LABELS = {S.STOPPING: gettext_lazy("Stop requested"), S.STOPPED: gettext_lazy("Stopped — cards released, billing stopped"),
               S.TERMINATING: gettext_lazy("Termination requested"), S.TERMINATED: gettext_lazy("Terminated — everything released")}
# States in which the machine is no longer there to log into (SSH commands are withheld).
NO_CONNECT = frozenset({S.STOPPING, S.STOPPED, S.TERMINATING, S.TERMINATED, S.FAILED})


def latest_run_start(events):
    """When the latest create/start request was made (None without events)."""
    at = None
    for event in events:
        if event.reason in ("create", "start requested"):
            at = event.created_at
    return at


def readiness_split(reports, events) -> tuple[list, list]:
    """(the latest run's reports, earlier runs' reports): after a restart the old reports are history."""
    since = latest_run_start(events)
    if since is None:
        return list(reports), []
    current = [r for r in reports if r.started_at >= since]
    return current, [r for r in reports if r.started_at < since]


@dataclass
class NodeVerdict:
    hostname: str
    attempts: int
    passed: bool


def readiness_by_node(reports) -> list[NodeVerdict]:
    """Per node tried: how many readiness attempts it had and whether one passed, in the order tried."""
    by_host: dict = {}
    for r in reports:
        host = ", ".join(r.nodes) if r.nodes and len(r.nodes) > 1 else r.node.hostname
        verdict = by_host.setdefault(host, NodeVerdict(host, 0, False))
        verdict.attempts += 1
        verdict.passed = verdict.passed or r.passed
    return list(by_host.values())


def readiness_failure_text(verdicts) -> str:
    """A failed instance's readiness outcome per node: "Readiness failed on 3 machines, 2 attempts each: …"."""
    failed = [v for v in verdicts if not v.passed]
    if not failed:
        return ""
    attempts = sorted({v.attempts for v in failed})
    tries = (f"{attempts[0]} attempt{'s' if attempts[0] != 1 else ''} each" if len(attempts) == 1 and len(failed) > 1
             else f"{attempts[0]} attempt{'s' if attempts[0] != 1 else ''}" if len(attempts) == 1
             else "attempts: " + ", ".join(f"{v.hostname} {v.attempts}" for v in failed))
    machines = f"{len(failed)} machine{'s' if len(failed) != 1 else ''}"
    return (gettext('The readiness test failed on %(machines)s (%(tries)s): %(join)s. It was not handed over, and the time spent testing is not charged.') % {'machines': machines, 'tries': tries, 'join': ', '.join(v.hostname for v in failed)})


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
    return sla_compensation_total(grant_refs=refs)


def topology_groups(instance):
    """The live node groups with node → zone and accelerator (one query)."""
    return selectors.instance_groups_live(instance=instance)


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
        text = ngettext("%(cards)s × %(name)s on %(hosts)s node: %(inside)s inside a node",
                        "%(cards)s × %(name)s on %(hosts)s nodes: %(inside)s inside a node", hosts) % {
            "cards": cards, "name": node.accelerator.name, "hosts": hosts, "inside": inside}
        if hosts > 1:
            text += gettext("; %(fabric)s across nodes") % {"fabric": fabric(node.zone)}
        lines.append(text)
    if len(vendors) > 1 and groups:
        lines.append(gettext("The vendors' parts talk over the zone's %(fabric)s fabric.") % {'fabric': fabric(groups[0].node.zone)})
    return lines


def fabric(zone) -> str:
    return zone.fabric_label
