"""The warm pool: whole nodes kept deployed with a default image and verified, so bare-metal creates skip the boot.

An operator sets, per zone and accelerator, how many nodes to keep (WarmPool, in the admin). The beat task
`provisioning.warm_pools_refill` (and one queued after each take) claims whole free nodes for the pool (their
cards allocated to a WarmNode row, holder kind warm_pool, so nothing else is placed there), deploys them through
the node's driver and runs the readiness test on all their cards. A node counts as warm while its check is younger
than WARM_POOL_MAX_AGE_HOURS; an older one is re-verified before it counts again. A node whose deploy fails leaves
the pool for maintenance, with the reason; one whose check fails leaves it for the second pass, like any readiness
failure (services/retest.py: its cards re-tested once; passing returns the node, failing quarantines it with both
reports).

A bare-metal create whose items all fit on fresh warm nodes of one zone, with the image the pool was deployed
with, takes them (`warm_take`, in the create's transaction): its groups start prepared, so the worker skips the
power-on, PXE and image steps and goes straight to readiness; the events say so.
"""
import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from core.dbclock import db_now
from core.outbox import outbox_send
from inventory.choices import CardHealth, HolderKind, NodeState
from inventory.models import Card, Node
from inventory.selectors import placement_snapshot
from inventory.services import CardsUnavailable, cards_allocate, cards_release, node_set_state
from tenancy.audit import audit_record

from ..choices import GroupState, RefillState, RetestCause, WarmState
from ..models import NodeGroup, WarmNode, WarmPool
from ..placement import BARE_METAL, Assignment, PlacementResult
from .cleaning import node_clean_begin
from .fleet import driver_for, forced_faults, node_ref
from .readiness_run import cards_test, clip, driver_call
from .retest import retest_begin

logger = logging.getLogger("cardmix.provisioning")

# A prepare or check still running after this long belonged to a worker that died: it is run again.
STEP_TIMEOUT = timedelta(minutes=30)


def max_age() -> timedelta:
    return timedelta(hours=settings.WARM_POOL_MAX_AGE_HOURS)


def _fresh(pool_ids, now):
    """Warm nodes that count now: checked within WARM_POOL_MAX_AGE_HOURS, on a node still in service."""
    return WarmNode.objects.filter(pool_id__in=list(pool_ids), state=WarmState.WARM, verified_at__gte=now - max_age(),
                                   node__state=NodeState.AVAILABLE)


def _unfit(rows) -> set:
    """Pks of warm rows whose node left service (an operator, a missed heartbeat) or holds a card not `ok`."""
    nodes = {w.node_id: w.pk for w in rows}
    gone = set(Node.objects.filter(pk__in=list(nodes)).exclude(state=NodeState.AVAILABLE).values_list("pk", flat=True))
    gone |= set(Card.objects.filter(node_id__in=list(nodes)).exclude(health=CardHealth.OK)
                .values_list("node_id", flat=True))
    return {nodes[n] for n in gone}


# -- taking warm nodes (a bare-metal create) ----------------------------------------------------------

def warm_take(*, instance, request, images: dict[str, str], catalog) -> PlacementResult | None:
    """Claim fresh warm nodes for every item of a bare-metal request, in one zone; inside the create's transaction.

    None when the pool cannot serve the whole request (another image, too few warm nodes): place it cold."""
    if request.kind != BARE_METAL or not request.items:
        return None
    now = db_now()
    pools = WarmPool.objects.select_related("zone", "image").filter(
        accelerator__slug__in={it.accelerator for it in request.items})
    if request.zone:
        pools = pools.filter(zone__slug=request.zone)
    by_zone: dict[str, dict[str, WarmPool]] = {}
    for pool in pools.select_related("accelerator"):
        if pool.image.slug == images.get(catalog[pool.accelerator.slug].vendor):
            by_zone.setdefault(pool.zone.slug, {})[pool.accelerator.slug] = pool
    for zone in sorted(by_zone):
        picked = _pick(request.items, by_zone[zone], now)
        if picked is None:
            continue
        try:
            with transaction.atomic():  # a savepoint: a card lost meanwhile leaves the pool as it was
                return _take(instance, request, picked, now)
        except CardsUnavailable:
            logger.warning("warm pool take lost a card; placing cold", extra={"instance_id": str(instance.pk)})
    return None


def _pick(items, pools: dict[str, WarmPool], now) -> list[tuple[int, WarmNode]] | None:
    """(item index, warm node) for every item, locked (skipping rows another create locks), or None."""
    picked: list[tuple[int, WarmNode]] = []
    for index, item in enumerate(items):
        pool = pools.get(item.accelerator)
        if pool is None:
            return None
        rows = (_fresh([pool.pk], now).exclude(pk__in=[w.pk for _, w in picked])
                .select_related("node", "pool__image", "pool__accelerator", "pool__zone")
                .select_for_update(skip_locked=True, of=("self",)).order_by("-verified_at", "pk"))
        cards = 0
        for warm in rows:
            if cards + warm.node.card_count > item.count:
                continue
            picked.append((index, warm))
            cards += warm.node.card_count
            if cards == item.count:
                break
        if cards != item.count:
            return None
    return picked


def _take(instance, request, picked, now) -> PlacementResult:
    """Move each warm node's cards to the instance and write its groups already prepared."""
    groups, assignments = [], []
    for index, warm in picked:
        node = warm.node
        cards = list(Card.objects.filter(node=node).order_by("index").values_list("pk", "index"))
        cards_release(holder_id=warm.pk)
        cards_allocate(card_ids=[pk for pk, _ in cards], holder_id=instance.pk)  # raises: the create rolls back
        indices = [i for _, i in cards]
        note = (f"warm pool: deployed with {warm.pool.image.slug} at {warm.prepared_at:%Y-%m-%d %H:%M:%S}, "
                f"readiness passed at {warm.verified_at:%Y-%m-%d %H:%M:%S}; boot and image steps skipped\n")
        groups.append(NodeGroup(
            instance=instance, item_index=index, accelerator=warm.pool.accelerator.slug, node=node,
            card_indices=indices, card_ids=[pk for pk, _ in cards], state=GroupState.PREPARED, warm=True,
            prepare_started_at=warm.prepared_at, prepared_at=now, prepare_output=clip(note + warm.prepare_output)))
        assignments.append(Assignment(index, warm.pool.accelerator.slug, str(node.pk), warm.pool.zone.slug,
                                      tuple(indices)))
    NodeGroup.objects.bulk_create(groups)
    WarmNode.objects.filter(pk__in=[w.pk for _, w in picked]).delete()
    outbox_send("provisioning.warm_pools_refill")  # refill after each take
    logger.info("warm pool take", extra={"instance_id": str(instance.pk), "nodes": [w.node.hostname for _, w in picked]})
    return PlacementResult(ok=True, assignments=assignments, items=list(request.items))


# -- keeping the pool filled (beat) ---------------------------------------------------------------------

def warm_pools_refill() -> dict[str, str]:
    """Refill every pool; {pool: its refill state}."""
    return {str(pk): warm_pool_refill(pool_id=pk) for pk in WarmPool.objects.values_list("pk", flat=True)}


def warm_pool_refill(*, pool_id) -> str:
    """Re-verify stale nodes, take over dead workers' steps, claim whole free nodes for the shortfall (each deployed
    and checked in its own task), give back the excess of a pool made smaller; returns the refill state."""
    now = db_now()
    with transaction.atomic():
        pool = WarmPool.objects.select_for_update().select_related("zone", "accelerator").get(pk=pool_id)
        rows = list(pool.nodes.select_for_update().order_by("pk"))
        unfit = _unfit(rows)
        for warm in [w for w in rows if w.pk in unfit]:  # the pool lets go; whoever took the node out decides
            _give_back(warm)
            rows.remove(warm)
        for warm in rows:
            if warm.state == WarmState.WARM and warm.verified_at < now - max_age():
                _dispatch(warm, WarmState.VERIFYING, now)  # stale: checked again before it counts
            elif warm.state != WarmState.WARM and warm.started_at < now - STEP_TIMEOUT:
                _dispatch(warm, warm.state, now)
        idle = [w for w in rows if w.state == WarmState.WARM]
        for warm in idle[:max(0, len(rows) - pool.size)]:  # the operator made the pool smaller
            _give_back(warm)
            rows.remove(warm)
        claimed = _claim_nodes(pool, pool.size - len(rows), now) if len(rows) < pool.size else 0
        short = len(rows) + claimed < pool.size
        busy = claimed or any(w.state != WarmState.WARM or w.verified_at < now - max_age() for w in rows)
        state = RefillState.SHORT if short else RefillState.REFILLING if busy else RefillState.IDLE
        note = (f"{pool.size - len(rows) - claimed} whole free node(s) missing" if short else
                f"{claimed} node(s) claimed" if claimed else "")
        WarmPool.objects.filter(pk=pool.pk).update(refill_state=state, refill_note=note, refilled_at=now)
    return state


def _give_back(warm: WarmNode) -> None:
    """Free a node the pool holds. It may run the pool's bare-metal image: it is cleaned first, as after any bare-metal
    instance (services/cleaning.py; the state it had comes back), unless it cannot be cleaned now."""
    node = Node.objects.select_for_update(of=("self",)).get(pk=warm.node_id)
    if node.state not in (NodeState.CLEANING, NodeState.RETIRED, NodeState.UNREACHABLE):
        node_clean_begin(node=node, reason="cleaning a node the warm pool gave back")
    cards_release(holder_id=warm.pk)
    warm.delete()


def _dispatch(warm: WarmNode, state: str, now) -> None:
    WarmNode.objects.filter(pk=warm.pk).update(state=state, started_at=now)
    warm.state, warm.started_at = state, now
    outbox_send("provisioning.warm_node_prepare" if state == WarmState.PREPARING else "provisioning.warm_node_verify",
                args=[str(warm.pk)])


def _claim_nodes(pool: WarmPool, wanted: int, now) -> int:
    """Hold up to `wanted` whole free nodes of the pool's zone and accelerator and queue their deploy."""
    claimed = 0
    for row in placement_snapshot(zone=pool.zone, accelerators=[pool.accelerator]):
        if claimed == wanted:
            break
        if row["state"] != NodeState.AVAILABLE or len(row["free"]) != row["card_count"]:
            continue
        warm = WarmNode.objects.create(pool=pool, node_id=row["id"], state=WarmState.PREPARING, started_at=now)
        try:
            card_ids = list(Card.objects.filter(node_id=row["id"]).values_list("pk", flat=True))
            cards_allocate(card_ids=card_ids, holder_kind=HolderKind.WARM_POOL, holder_id=warm.pk)
        except CardsUnavailable:  # taken since the snapshot
            warm.delete()
            continue
        outbox_send("provisioning.warm_node_prepare", args=[str(warm.pk)])
        claimed += 1
    return claimed


# -- deploying and checking one node (its own task) -----------------------------------------------------

def _load(warm_id, state: str) -> WarmNode | None:
    return (WarmNode.objects.select_related("pool__image", "node__zone", "node__accelerator")
            .filter(pk=warm_id, state=state).first())


def warm_node_prepare(*, warm_id) -> str:
    """Deploy the node with the pool's image through its driver, then check it; returns the outcome."""
    warm = _load(warm_id, WarmState.PREPARING)
    if warm is None:
        return "gone"
    node = warm.node
    driver = driver_for(node)
    out = driver_call(None, driver.prepare, node_ref(node), list(range(node.card_count)), kind=BARE_METAL,
                      image=warm.pool.image.slug, ssh_keys=[], env={}, instance_id=str(warm.pk),
                      **forced_faults(driver, [node.pk], "prepare"))
    if not out.ok:
        lines = [ln for ln in (out.text or "").splitlines() if ln.strip()]
        return _leave(warm, f"warm pool: deploy failed (exit {out.exit_code}): {(lines or ['no output'])[-1][:200]}")
    now = db_now()
    if not WarmNode.objects.filter(pk=warm.pk, state=WarmState.PREPARING).update(
            state=WarmState.VERIFYING, prepared_at=now, started_at=now, prepare_output=clip(out.text)):
        return "gone"
    return warm_node_verify(warm_id=warm.pk)


def warm_node_verify(*, warm_id) -> str:
    """Run the readiness test on all the node's cards: pass → warm (the check's time), fail → its second pass."""
    warm = _load(warm_id, WarmState.VERIFYING)
    if warm is None:
        return "gone"
    node = warm.node
    report = cards_test(None, None, node, range(node.card_count), attempt=1)
    if not report.passed:
        return _retest(warm, report)
    WarmNode.objects.filter(pk=warm.pk, state=WarmState.VERIFYING).update(
        state=WarmState.WARM, verified_at=report.finished_at, report=report)
    warm_pool_refill(pool_id=warm.pool_id)  # its refill state, now that this node counts
    return WarmState.WARM


def _leave(warm: WarmNode, reason: str) -> str:
    """The node leaves the pool for an operator (maintenance, with the reason); the pool refills elsewhere."""
    with transaction.atomic():
        if WarmNode.objects.select_for_update().filter(pk=warm.pk).first() is None:
            return "gone"
        cards_release(holder_id=warm.pk)
        WarmNode.objects.filter(pk=warm.pk).delete()
        node_set_state(node=warm.node, state=NodeState.MAINTENANCE, reason=reason[:500])
        outbox_send("provisioning.warm_pools_refill")
    logger.warning("warm pool node left", extra={"node": warm.node.hostname, "reason": reason[:300]})
    return "left"


def _retest(warm: WarmNode, report) -> str:
    """The check failed: the node leaves the pool for its second pass (quarantined pending, cards held degraded), as
    an instance's readiness failure does; the pool refills elsewhere."""
    with transaction.atomic():
        if WarmNode.objects.select_for_update().filter(pk=warm.pk).first() is None:
            return "gone"
        node = Node.objects.select_for_update(of=("self",)).get(pk=warm.node_id)
        cards = list(Card.objects.filter(node=node).order_by("index").values_list("pk", "index"))
        cards_release(holder_id=warm.pk)
        WarmNode.objects.filter(pk=warm.pk).delete()
        retest_begin(instance=None, group=None, node=node, cause=RetestCause.WARM_CHECK_FAILED,
                     card_ids=[pk for pk, _ in cards], card_indices=[i for _, i in cards], first_report=report)
        outbox_send("provisioning.warm_pools_refill")
    logger.warning("warm pool node left for its second pass", extra={"node": node.hostname, "report": report.pk,
                                                                     "errors": [str(e) for e in report.errors[:3]]})
    return "retest"


def warm_pool_status(pool: WarmPool) -> tuple[int, float | None]:
    """(warm nodes counting now, age in seconds of the oldest check among them, or None when there are none)."""
    now = db_now()
    fresh = list(_fresh([pool.pk], now).values_list("verified_at", flat=True))
    return len(fresh), (now - min(fresh)).total_seconds() if fresh else None


def warm_pool_rows():
    """Every pool with its status (the admin's and /metrics' view)."""
    pools = WarmPool.objects.select_related("zone", "accelerator", "image").order_by("zone__slug", "accelerator__slug")
    return [(pool, *warm_pool_status(pool)) for pool in pools]


def warm_pool_save(*, pool: WarmPool, actor=None, request=None) -> WarmPool:
    """Create or change a pool (the admin's form has set its fields); audited, and refilled at once."""
    creating = pool._state.adding
    with transaction.atomic():
        pool.save()
        audit_record(action="warm_pool.create" if creating else "warm_pool.update", actor=actor, request=request,
                     target=pool, details={"zone": pool.zone.slug, "accelerator": pool.accelerator.slug,
                                           "size": pool.size, "image": pool.image.slug})
        outbox_send("provisioning.warm_pools_refill")
    return pool
