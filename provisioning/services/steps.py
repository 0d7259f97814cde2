"""The worker's steps: prepare node groups, run readiness, go running; release on stop/terminate.

Each step reads the rows, skips what is already done, and locks the instance only for its state
change or to write a driver call's outcome, so a retried or re-dispatched task resumes where the last
one stopped and a terminate landing mid-call is never overwritten.
"""
import logging

from django.conf import settings
from django.db import transaction
from django.db.models import Prefetch

from core.dbclock import db_now
from core.errors import InsufficientFunds
from core.failpoints import failpoint
from inventory.choices import NodeState
from inventory.custom_images import pull_auth, pull_reference
from inventory.models import Node
from inventory.selectors import custom_images_for_run, images_named

from ..choices import FUNDS_FAILURE, PROVISIONED_WARM, GroupState, InstanceKind, ReportScope
from ..choices import InstanceState as S
from ..endpoints import container_ssh_port
from ..http_ports import http_env
from ..lock_objects import instance_lock
from ..models import Instance, NodeGroup, ReadinessReport
from ..platform_keys import authorized_keys
from ..readiness import evaluate, parse_output, parse_reachability
from ..stop_keeps import stop_reason
from . import billing_port, slurm_partitions, storage_port
from .claims import placement_release
from .cleaning import node_clean_begin
from .cluster import (
    ClusterPoolExhausted,
    cluster_part,
    cluster_plan,
    cluster_slot_ensure,
    is_cluster,
    needs_slot,
)
from .fleet import driver_for, driver_touched, forced_faults, instance_env, node_ref, release_cards
from .readiness_health import (
    CardsFailed,
    cards_failed,
    groups_with_failed_cards,
    health_failure_reason,
    health_failure_report,
)
from .readiness_run import cards_test, clip, report_write
from .readiness_run import driver_call as _call
from .transitions import instance_transition
from .volume_mounts import prepare_storage

logger = logging.getLogger("cardmix.provisioning")

PREPARE_ATTEMPTS = 2  # a boot failure is retried once on the same node
CHECK_ATTEMPTS = 2  # SPEC §3: a failed readiness test is retried once on the same node


def _groups(instance_id) -> list[NodeGroup]:
    nodes = Node.objects.select_related("zone", "accelerator")
    return list(NodeGroup.objects.live().filter(instance_id=instance_id)
                .prefetch_related(Prefetch("node", queryset=nodes)).order_by("item_index", "id"))


def _advance(instance_id, *, expect: str, to: str, reason: str, **fields) -> Instance | None:
    """Lock; if the instance is still in `expect`, move it to `to`. None when someone else moved it."""
    with transaction.atomic():
        instance = instance_lock(instance_id=instance_id)
        if instance.state != expect:
            return None
        if to == S.RUNNING:
            # A card its agent reported failed since the check: not handed over (readiness_health.py).
            failed = groups_with_failed_cards(_groups(instance_id))
            if failed:
                raise CardsFailed(failed[0])
            failpoint("provision:before_meter")
            billing_port.meters_open(instance=instance)
        instance_transition(instance=instance, to=to, reason=reason, **fields)
        return instance


def _group_live(group: NodeGroup, expect: str) -> bool:
    """The group is still placed and its instance still in `expect` (checked before each driver call)."""
    return NodeGroup.objects.live().filter(pk=group.pk, instance__state=expect).exists()


def _group_write(instance_id, group: NodeGroup, expect: str, **fields) -> bool:
    """Save a driver call's outcome only while the group is placed and its instance still in `expect`.

    Under the instance lock, so a terminate commits either before (nothing is written: the caller undoes
    what the driver did) or after (its release then reads this write, e.g. prepared_at).
    """
    with transaction.atomic():
        if instance_lock(instance_id=instance_id).state != expect:
            return False
        return NodeGroup.objects.live().filter(pk=group.pk).update(**fields) == 1


def _driver_release(instance: Instance, group: NodeGroup) -> None:
    """Stop the group's container, or power its node off (bare metal: no card list)."""
    node = group.node
    _call(group, driver_for(node).release, node_ref(node), release_cards(instance, group), instance_id=str(instance.pk))


def _published_port(meta: dict) -> int | None:
    port = meta.get("ssh_port")  # an agent's word: only a real port number counts
    return port if type(port) is int and 0 < port < 65536 else None


def _published_http(meta: dict) -> dict:
    """The agent's {"<port>": node port} of a container's published HTTP ports (none: on the node itself)."""
    ports = meta.get("http_ports")
    if not isinstance(ports, dict):
        return {}
    return {str(k): v for k, v in ports.items() if str(k).isdigit() and type(v) is int and 0 < v < 65536}


def _reported_host_key(meta: dict) -> str:
    """The instance sshd's host key as the driver read it at prepare ("" when it did not: pinned on first use)."""
    from ..host_keys import key_line

    return key_line(meta.get("ssh_host_key"))


# -- provisioning ----------------------------------------------------------------------------

def group_prepare(instance: Instance, group: NodeGroup) -> bool | None:
    """Start the container / deploy the node for one group (skipped when already prepared).

    None: the instance left `provisioning` or the group was released meanwhile; stop provisioning.
    """
    if group.prepared_at is not None:
        return True if not group.warm or group.keys_installed_at is not None else group_keys_install(instance, group)
    node = group.node
    driver = driver_for(node)
    ref = node_ref(node)
    vendor = node.accelerator.vendor
    container = instance.kind == InstanceKind.CONTAINER
    # Its view of the instance's cluster (None: one part): addresses, hostfile, rendezvous environment.
    part = cluster_part(instance=instance, group=group, groups=_groups(instance.pk))
    env = instance_env(instance_id=str(instance.pk), collective=ref.collective, cards=group.card_indices)
    if part is not None:
        env.update(part["env"])
    storage = prepare_storage(instance=instance, node=node)  # its volumes and datasets (None: none)
    # Its HTTP ports: the proxy prefix, JupyterLab's token, and a container's publishing map (http_ports.py).
    images = images_named(instance.images.values())
    env.update(http_env(instance, images, group.card_indices, container=container))
    image = instance.images.get(vendor, "")
    custom = custom_images_for_run([image]).get(image) if container else None
    pull = {}
    if custom is not None:  # a private image: its pinned reference, pulled with its login (sealed)
        image, auth = pull_reference(custom), pull_auth(custom)
        pull = {"registry_auth": auth} if auth else {}
    while group.prepare_attempts < PREPARE_ATTEMPTS:
        # Written before the call (see driver_touched): a release then reaches the driver even if this worker
        # dies inside it. An attempt counts once it has an outcome, so a crash costs the customer none.
        group.prepare_started_at = db_now()
        if not _group_write(instance.pk, group, S.PROVISIONING, prepare_started_at=group.prepare_started_at):
            return None
        group.prepare_attempts += 1
        failpoint("provision:before_driver")
        out = _call(group, driver.prepare, ref, group.card_indices, kind=instance.kind, image=image, **pull,
                    ssh_keys=authorized_keys(instance), env=env, instance_id=str(instance.pk),
                    ssh_port=container_ssh_port(group.card_indices) if container else None,
                    **({"cluster": part} if part is not None else {}),
                    **({"storage": storage} if storage else {}),
                    **forced_faults(driver, [node.pk], "prepare"))
        failpoint("provision:after_driver")
        group.prepare_output, group.prepare_exit_code = clip(out.text), out.exit_code
        if out.ok:
            group.prepared_at, group.state = db_now(), GroupState.PREPARED
            # The port the driver says it published (an agent that predates published ports says none).
            group.ssh_port = _published_port(out.meta) if container else None
            group.http_ports = _published_http(out.meta) if container else {}
            group.ssh_host_key = _reported_host_key(out.meta)  # else pinned on first use (host_keys.py)
        if not _group_write(instance.pk, group, S.PROVISIONING, prepare_attempts=group.prepare_attempts,
                            prepare_output=group.prepare_output, prepare_exit_code=group.prepare_exit_code,
                            prepared_at=group.prepared_at, state=group.state, driver_seconds=group.driver_seconds,
                            ssh_port=group.ssh_port, http_ports=group.http_ports,
                            ssh_host_key=group.ssh_host_key):
            # Released while the driver ran: that release may have come before the container did, so
            # stop here whatever this call started, or it keeps running on cards given back.
            _driver_release(instance, group)
            return None
        if out.ok:
            return True
    return False


def group_keys_install(instance: Instance, group: NodeGroup) -> bool | None:
    """A warm group's hand-over: the node was deployed before its tenant was known, so the instance's keys (the users'
    and the platform's) are installed now through its driver, tried like a prepare; the driver's answer is appended to
    the group's prepare output. None: the instance left `provisioning` or the group was released meanwhile."""
    node = group.node
    driver = driver_for(node)
    keys = authorized_keys(instance)
    for _attempt in range(PREPARE_ATTEMPTS):
        if not _group_live(group, S.PROVISIONING):
            return None
        out = _call(group, driver.install_keys, node_ref(node), instance_id=str(instance.pk), ssh_keys=keys,
                    **forced_faults(driver, [node.pk], "install_keys"))
        group.prepare_output = clip(f"{group.prepare_output}{out.text}")
        group.keys_installed_at = db_now() if out.ok else None
        if not _group_write(instance.pk, group, S.PROVISIONING, prepare_output=group.prepare_output,
                            keys_installed_at=group.keys_installed_at, driver_seconds=group.driver_seconds):
            # Released while the driver ran: that release may have come before the keys did; take them away.
            _driver_release(instance, group)
            return None
        if out.ok:
            return True
    group.prepare_exit_code = out.exit_code
    NodeGroup.objects.filter(pk=group.pk).update(prepare_exit_code=out.exit_code)
    return False


def instance_provision(instance_id) -> None:
    """provisioning → checking once every group is prepared; failed when a group will not boot."""
    instance = Instance.objects.select_related("organization").get(pk=instance_id)
    if instance.state != S.PROVISIONING:
        return
    failpoint("provision:after_claim")
    groups = _groups(instance_id)
    if needs_slot(kind=instance.kind, groups=groups) and cluster_slot_ensure(instance_id=instance_id) is None:
        _cluster_failed(instance, str(ClusterPoolExhausted("no free /24 left in CLUSTER_SUBNET_POOL")))
        return
    for group in groups:
        prepared = group_prepare(instance, group)
        if prepared is None:
            return
        if not prepared:
            group_failed(instance, group, f"{group.node.hostname}: provisioning failed "
                                          f"(exit {group.prepare_exit_code})")
            return
    warm = bool(groups) and all(g.warm for g in groups)  # deployed beforehand: no boot, no image step ran
    _advance(instance_id, expect=S.PROVISIONING, to=S.CHECKING, reason=PROVISIONED_WARM if warm else "provisioned")


# -- readiness -------------------------------------------------------------------------------

def group_check(instance: Instance, group: NodeGroup) -> bool | None:
    """Intra-node all_reduce (≥ 2 cards) or a device health check (1 card), retried once.

    None: the instance left `checking` or the group was released meanwhile (its release stops the
    container, since prepared_at is set); stop checking.
    """
    if group.state == GroupState.CHECKED:
        return True
    if not _group_live(group, S.CHECKING):
        return None
    node = group.node
    driver = driver_for(node)
    ref = node_ref(node)
    topology = _call(group, driver.topology, ref).text
    while group.check_attempts < CHECK_ATTEMPTS:
        if _health_failed(instance, group):
            return False
        group.check_attempts += 1
        if not _group_write(instance.pk, group, S.CHECKING, check_attempts=group.check_attempts,
                            driver_seconds=group.driver_seconds):
            return None
        report = cards_test(instance, group, node, group.card_indices, attempt=group.check_attempts,
                            topology=topology)
        failpoint("provision:after_readiness")
        if report.passed and _health_failed(instance, group):
            return False
        if report.passed:
            group.state, group.checked_at = GroupState.CHECKED, db_now()
            return _group_write(instance.pk, group, S.CHECKING, state=group.state, checked_at=group.checked_at,
                                driver_seconds=group.driver_seconds) or None
    return False


def _health_failed(instance: Instance, group: NodeGroup) -> bool:
    """A card of the group was reported failed by its agent: the check fails at once, with a report saying so."""
    failed = cards_failed(group)
    if failed:
        health_failure_report(instance, group, failed)
    return bool(failed)


def _check_failed(instance: Instance, group: NodeGroup) -> None:
    """A group failed its check: its cards' health, when that was why, else the test twice."""
    failed = cards_failed(group)
    group_failed(instance, group, health_failure_reason(group, failed) if failed
                 else f"{group.node.hostname}: readiness failed twice")


def _passed_since_placed(first: NodeGroup, groups: list[NodeGroup], scope: str) -> bool:
    """A cross-node run passed after the last of these groups was placed (one before a re-placement tested
    another set of nodes). created_at is the app's clock, started_at the database's: a skew can only make a resumed
    check run the test once more."""
    return ReadinessReport.objects.filter(group=first, scope=scope, passed=True,
                                          started_at__gte=max(g.created_at for g in groups)).exists()


def vendor_inter_node(instance: Instance, groups: list[NodeGroup]) -> bool:
    """One all_reduce across every node of one vendor (one group per node), against the zone's floor; each node
    runs the cards its group holds (a container: not the other tenants'). Once passed, skipped."""
    first = groups[0]
    if _passed_since_placed(first, groups, ReportScope.INTER_NODE):
        return True
    nodes = [g.node for g in groups]
    driver = driver_for(first.node)
    refs = [node_ref(n) for n in nodes]
    floor = float(first.node.zone.inter_node_floor_gbps)
    per_node = min(len(g.card_indices) for g in groups)
    # A container's own cards, never the first ones of a node it shares; bare metal holds whole nodes.
    cards = [list(g.card_indices)[:per_node] for g in groups] if instance.kind == InstanceKind.CONTAINER else None
    for attempt in range(1, CHECK_ATTEMPTS + 1):
        started = db_now()
        out = _call(first, driver.inter_node, refs, per_node, cards=cards,
                    **forced_faults(driver, [n.pk for n in nodes], "inter_node"))
        tool = out.meta.get("tool") or ("hccl_test" if refs[0].collective == "hccl" else "nccl-tests")
        parsed = parse_output(out.text, tool=tool, ranks=len(nodes) * per_node)
        verdict = evaluate(parsed, floor, out.exit_code)
        report = report_write(instance, first, first.node, scope=ReportScope.INTER_NODE, tool=tool,
                         command=out.meta.get("command", ""), attempt=attempt, cards=first.card_indices,
                         out=out, started=started, parsed=parsed, verdict=verdict,
                         nodes=[n.hostname for n in nodes])
        NodeGroup.objects.filter(pk=first.pk).update(driver_seconds=first.driver_seconds)
        if report.passed:
            return True
    return False


def cluster_reachability(instance: Instance, groups: list[NodeGroup]) -> bool:
    """A hybrid: each part connects over TCP to every other part's cluster address (once passed, skipped)."""
    first = groups[0]
    if _passed_since_placed(first, groups, ReportScope.REACHABILITY):
        return True
    plan = {**cluster_plan(kind=instance.kind, groups=groups, slot=instance.cluster_slot),
            "instance_id": str(instance.pk), "kind": instance.kind}
    nodes = list({g.node_id: g.node for g in groups}.values())
    driver = driver_for(first.node)
    for attempt in range(1, CHECK_ATTEMPTS + 1):
        started = db_now()
        out = _call(first, driver.reachability, [node_ref(n) for n in nodes], plan,
                    timeout_s=settings.CLUSTER_PROBE_TIMEOUT_SECONDS,
                    **forced_faults(driver, [n.pk for n in nodes], "reachability"))
        result = parse_reachability(out.text, out.exit_code, parts=len(plan["parts"]))
        report = ReadinessReport.objects.create(
            instance=instance, group=first, node=first.node, nodes=[n.hostname for n in nodes],
            scope=ReportScope.REACHABILITY, tool="tcp", command=out.meta.get("command", "")[:300], attempt=attempt,
            cards=[], rows=result.rows, errors=list(result.reasons), passed=result.passed,
            raw_output=clip(out.text), exit_code=out.exit_code, started_at=started, finished_at=db_now())
        logger.info("readiness report", extra={
            "instance_id": str(instance.pk), "step": "readiness:reachability", "node_id": str(first.node_id),
            "tool": "tcp", "attempt": attempt, "passed": report.passed, "errors": report.errors[:5]})
        NodeGroup.objects.filter(pk=first.pk).update(driver_seconds=first.driver_seconds)
        if report.passed:
            return True
    return False


def instance_check(instance_id) -> None:
    """checking → running (meters open) when every group and multi-node item passes."""
    instance = Instance.objects.select_related("organization").get(pk=instance_id)
    if instance.state != S.CHECKING:
        return
    groups = _groups(instance_id)
    for group in groups:
        checked = group_check(instance, group)
        if checked is None:
            return
        if not checked:
            _check_failed(instance, group)
            return
    # Multi-node: one run across all nodes of each vendor (one group per node: two containers of the instance
    # on one node share its links). A hybrid: every part reaches every other one on the cluster network.
    by_vendor: dict[str, dict] = {}
    for group in groups:
        by_vendor.setdefault(group.node.accelerator.vendor, {}).setdefault(group.node_id, group)
    for vendor, per_node in by_vendor.items():
        if len(per_node) < 2:
            continue
        vendor_groups = list(per_node.values())
        if not _group_live(vendor_groups[0], S.CHECKING):
            return
        if not vendor_inter_node(instance, vendor_groups):
            group_failed(instance, vendor_groups[0], f"inter-node readiness ({vendor}) failed twice")
            return
    if len(by_vendor) >= 2 and is_cluster(groups):
        if not _group_live(groups[0], S.CHECKING):
            return
        instance.refresh_from_db(fields=["cluster_slot"])
        if not cluster_reachability(instance, groups):
            # Like an inter-node failure: no single node to blame, nothing is quarantined (quarantine.py).
            group_failed(instance, groups[0], "cluster reachability between the hybrid's parts failed twice")
            return
    try:
        moved = _advance(instance_id, expect=S.CHECKING, to=S.RUNNING, reason="readiness passed", ready_at=db_now(),
                         step_deadline=None)
    except InsufficientFunds as exc:  # a monthly package charged on entering running, spent elsewhere meanwhile
        _failed_for_funds(instance, exc.message)
        return
    except CardsFailed as exc:  # after its check passed: failed like one its test had caught
        group = exc.group
        health_failure_report(instance, group, cards_failed(group))
        group.state = GroupState.PREPARED  # its node's failure (quarantine.py), not an inter-node one
        _check_failed(instance, group)
        return
    if moved is not None:
        slurm_partitions.partition_open(instance=moved, groups=groups)


def _cluster_failed(instance: Instance, reason: str) -> None:
    """No private network can be given to its parts: fail it, cards freed (no node is to blame)."""
    from .sla import sla_dispatch

    if _advance(instance.pk, expect=S.PROVISIONING, to=S.FAILED, reason=reason[:300], step_deadline=None) is not None:
        groups_release(instance.pk)
        sla_dispatch(instance.pk)


def _failed_for_funds(instance: Instance, message: str) -> None:
    """Ready, but the organization cannot pay for it now: fail it at once with the cards freed. Before, the
    refused charge rolled the step back and readiness ran again until the reconciler failed the instance
    — and the SLA then compensated the customer for a hand-over only their own funds had stopped."""
    from .sla import sla_dispatch

    reason = f"{FUNDS_FAILURE}: {message}"[:300]
    if _advance(instance.pk, expect=S.CHECKING, to=S.FAILED, reason=reason, step_deadline=None) is not None:
        groups_release(instance.pk)
        sla_dispatch(instance.pk)  # settles the window: not a breach (sla.py)


def group_failed(instance: Instance, group: NodeGroup, reason: str) -> None:
    """A group failed beyond its retries: quarantine its node and re-place it (services/quarantine.py)
    while the SLA window is open (≤ 2 re-placements per instance); else the instance fails, its cards
    are freed and the SLA compensation is settled.
    """
    from .quarantine import group_replace
    from .sla import sla_dispatch

    if not NodeGroup.objects.live().filter(pk=group.pk).update(state=GroupState.FAILED):
        return  # released meanwhile (terminated, or failed by the reconciler): whoever did it freed the rest
    if group_replace(instance=instance, group=group, reason=reason):  # quarantined and placed elsewhere
        return
    moved = _advance(instance.pk, expect=instance.state, to=S.FAILED, reason=reason[:300], step_deadline=None)
    if moved is not None:
        groups_release(instance.pk)
        sla_dispatch(instance.pk)  # compensation for the failure, without waiting for the beat


# -- stop / terminate -------------------------------------------------------------------------

def groups_release(instance_id, *, expect: str | None = None) -> bool:
    """Stop containers / power nodes off for every live group, then free the cards (idempotent).

    Bare-metal nodes go to `cleaning` (hardware wipes them) in the same transaction that frees
    their cards, so no other tenant can be placed on a node that still holds this one's data.
    `expect`: the state being left (a stop). Two stop tasks may run at once (the reconciler re-dispatches
    one stuck on a slow release); the one that ends second must not touch a placement made since, and
    answers False (the stop is not its own to finish).
    """
    instance = Instance.objects.get(pk=instance_id)
    groups = _groups(instance_id)
    for group in groups:
        # Re-read: a group another task released meanwhile is not ours to release again — by now a start may
        # have placed a new group on its cards, whose container has its name.
        if driver_touched(group) and NodeGroup.objects.live().filter(pk=group.pk).exists():
            _driver_release(instance, group)
            NodeGroup.objects.filter(pk=group.pk).update(driver_seconds=group.driver_seconds)
        failpoint("release:after_driver")
    if expect is not None and groups and not NodeGroup.objects.live().filter(
            pk__in=[g.pk for g in groups]).exists():
        # Another task ended this stop: the partition (named by instance) and the cards the instance holds now,
        # even in the same state again (started and stopped meanwhile), belong to a newer placement.
        return False
    slurm_partitions.partition_close(instance=instance, groups=groups)
    return placement_release_clean(instance=instance, expect=expect)


def placement_release_clean(*, instance: Instance, expect: str | None = None) -> bool:
    """Free the instance's cards; a bare-metal instance's nodes go to `cleaning` in the same transaction.

    Every path that frees a bare-metal placement (worker, reconciler) goes through here, so no node
    returns to the pool with the previous tenant's disks. With `expect`, only while the instance is still
    in that state (under its lock): once it moved on, the cards it holds belong to a newer placement (False).
    """
    with transaction.atomic():
        if expect is not None and instance_lock(instance_id=instance.pk).state != expect:
            return False
        if instance.kind == "bare_metal":
            live = NodeGroup.objects.live().filter(instance_id=instance.pk).values("node_id")
            # Locked in pk order, so two concurrent releases begin one clean, not two.
            nodes = (Node.objects.select_for_update(of=("self",)).filter(pk__in=live)
                     .exclude(state__in=[NodeState.CLEANING, NodeState.RETIRED]).order_by("pk"))
            for node in list(nodes):
                node_clean_begin(node=node)
        placement_release(instance=instance)
    return True


def instance_stop_finish(instance_id) -> None:
    """stopping → stopped once the groups are released; the reason says what the stop kept (its volumes, or
    nothing: provisioning/stop_keeps.py)."""
    kind = Instance.objects.filter(pk=instance_id, state=S.STOPPING).values_list("kind", flat=True).first()
    if kind is not None:
        if groups_release(instance_id, expect=S.STOPPING):  # else another task finished this stop
            _advance(instance_id, expect=S.STOPPING, to=S.STOPPED, step_deadline=None,
                     reason=stop_reason(kind, storage_port.volume_names_of(instance_id=instance_id)))


def instance_terminate_finish(instance_id) -> None:
    """terminating → terminated once everything is released."""
    if Instance.objects.filter(pk=instance_id, state=S.TERMINATING).exists():
        groups_release(instance_id)
        _advance(instance_id, expect=S.TERMINATING, to=S.TERMINATED, reason="terminated", step_deadline=None,
                 terminated_at=db_now())
