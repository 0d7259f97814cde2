"""Placement plus the claim of the chosen cards, safe under concurrency.

Placement runs over a view of the free cards read without locks (an in-memory index kept current
from inventory's change log); the claim then locks the chosen cards in pk
order and re-checks them (inventory.services.cards_allocate), with the unique live-allocation
constraint as the last guard. A conflict means another request won those cards: take a fresh
snapshot and place again, a few times.
"""
from django.db import transaction
from django.db.models import Q

from core.dbclock import db_now
from core.metrics import PLACEMENT_SECONDS
from inventory.models import Card
from inventory.services import CardsUnavailable, cards_allocate, cards_release

from ..choices import GroupState
from ..models import Instance, NodeGroup
from ..placement import AcceleratorInfo, PlacementResult, place
from .capacity import free_snapshot, prefers_measured
from .cluster import cluster_slot_free
from .demand import demand_workload
from .placement_index import placement_fleet, placement_forget
from .retest import retests_for_degraded

CLAIM_ATTEMPTS = 5


def placement_decide(request, catalog: dict[str, AcceleratorInfo]) -> PlacementResult:
    """Place a request over the free cards this transaction sees now (nothing is taken).

    Over the process's incrementally kept index (services/placement_index.py), scored for the learned demand
    (services/demand.py); for requests that prefer measured nodes, over a fresh snapshot of the asked-for types.
    """
    measured = prefers_measured(request)
    if not measured:
        with placement_fleet() as fleet, PLACEMENT_SECONDS.time():
            return fleet.place(request, catalog)
    # Bare-metal and multi-node requests prefer the best-measured nodes (busbw): the kept index carries none, so
    # these rarer, larger requests read a snapshot of their types with it.
    accelerators = None
    if request.items:
        accelerators = sorted({item.accelerator for item in request.items})
    snapshot = free_snapshot(zone=request.zone, accelerators=accelerators, measured=measured)
    with PLACEMENT_SECONDS.time():  # the pure decision, not the snapshot query
        return place(snapshot, request, catalog, workload=demand_workload())


def _card_ids(result: PlacementResult) -> dict[tuple[str, int], int]:
    """(node id, card index) → Card pk for every card the result names, in one query."""
    where = Q()
    for a in result.assignments:
        where |= Q(node_id=a.node_id, index__in=list(a.card_indices))
    return {(str(n), i): pk for pk, n, i in Card.objects.filter(where).order_by().values_list("pk", "node_id", "index")}


def placement_claim(*, instance: Instance, request, catalog) -> PlacementResult:
    """Place and claim cards for `instance`, writing its NodeGroup rows; call inside transaction.atomic.

    Returns the successful result, or the last unsuccessful one (insufficient capacity or invalid).
    """
    result = PlacementResult(ok=False)
    for _attempt in range(CLAIM_ATTEMPTS):
        result = placement_decide(request, catalog)
        if not result.ok:
            return result
        ids = _card_ids(result)
        try:
            # cards_allocate runs in a savepoint: a lost race undoes only this attempt.
            cards_allocate(card_ids=list(ids.values()), holder_id=instance.pk)
        except CardsUnavailable:
            placement_forget(a.node_id for a in result.assignments)  # re-read what the index had wrong
            continue
        NodeGroup.objects.bulk_create([
            NodeGroup(instance=instance, item_index=a.item_index, accelerator=a.accelerator, node_id=a.node_id,
                      card_indices=list(a.card_indices),
                      card_ids=[ids[(str(a.node_id), i)] for i in a.card_indices])
            for a in result.assignments
        ])
        return result
    return PlacementResult.insufficient({}, "capacity kept changing under concurrent requests; try again")


def placement_release(*, instance: Instance) -> int:
    """Release every card the instance holds and mark its live groups released (idempotent); its degraded
    cards get their second pass (services/retest.py)."""
    with transaction.atomic():
        retests_for_degraded(instance=instance, groups=list(NodeGroup.objects.live().filter(instance=instance)))
        released = cards_release(holder_id=instance.pk)
        NodeGroup.objects.live().filter(instance=instance).update(
            released_at=db_now(), state=GroupState.RELEASED)
        cluster_slot_free(instance_id=instance.pk)  # its cluster networks went with its containers
    return released
