"""Property tests: placements are always legal, and complete/cheapest against a brute-force oracle."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from provisioning.placement import (
    STRATEGIES,
    AcceleratorInfo,
    Fleet,
    Item,
    NodeSnapshot,
    PlacementRequest,
    Policy,
    place,
)

from .oracle import cheapest_mix, items_feasible

CATALOG = {
    "h800": AcceleratorInfo("h800", "nvidia", False, 20_000_000),
    "h20": AcceleratorInfo("h20", "nvidia", False, 9_000_000),
    "910b": AcceleratorInfo("910b", "huawei", True, 12_000_000),
    "mlu": AcceleratorInfo("mlu", "cambricon", True, 9_000_000),
}
ACCS = sorted(CATALOG)
FEW_ACCS = ("h800", "910b")  # two types so random nodes and items often meet
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def fleets(draw, max_nodes=6, whole=False):
    n = draw(st.integers(1, max_nodes))
    nodes = []
    for i in range(n):
        size = draw(st.sampled_from((1, 2, 4, 8, 8, 8)))
        free = draw(st.frozensets(st.integers(0, size - 1)))
        if whole or draw(st.booleans()):
            free = frozenset(range(size))  # plenty of whole free nodes for bare metal
        state = draw(st.sampled_from(("available", "available", "available", "maintenance")))
        nodes.append(
            NodeSnapshot(
                f"n{i}",
                draw(st.sampled_from(("z1", "z2"))),
                draw(st.sampled_from(ACCS if draw(st.booleans()) else FEW_ACCS)),
                size,
                free,
                state,
            )
        )
    return nodes


@st.composite
def item_requests(draw, kind=None):
    kind = kind or draw(st.sampled_from(("container", "bare_metal")))
    n_items = draw(st.sampled_from((1, 1, 2, 3)))
    if kind == "container":
        items = tuple(
            Item(draw(st.sampled_from(FEW_ACCS)), draw(st.sampled_from((1, 1, 2, 3, 4, 8))))
            for _ in range(n_items)
        )
    else:
        items = tuple(
            Item(draw(st.sampled_from(FEW_ACCS)), draw(st.sampled_from((1, 2, 4, 8, 8, 16))))
            for _ in range(n_items)
        )
    zone = draw(st.sampled_from((None, None, "z1", "z2")))
    return PlacementRequest(kind, items, zone=zone)


@st.composite
def policy_requests(draw, kind=None):
    kind = kind or draw(st.sampled_from(("container", "bare_metal")))
    vendors = tuple(
        draw(st.lists(st.sampled_from(("nvidia", "huawei", "cambricon")), min_size=1, unique=True))
    )
    policy = Policy(draw(st.integers(1, 12)), vendors, draw(st.sampled_from((0.0, 0.25, 0.5, 1 / 3, 1.0))))
    return PlacementRequest(kind, policy=policy, zone=draw(st.sampled_from((None, None, "z1"))))


def check_legal(nodes: list[NodeSnapshot], request: PlacementRequest, result) -> None:
    """Every rule a successful placement must obey."""
    by_id = {n.id: n for n in nodes}
    seen: set[tuple] = set()
    zones = {a.zone for a in result.assignments}
    assert len(zones) == 1, "all parts in one zone"
    if request.zone:
        assert zones == {request.zone}
    per_item = [0] * len(result.items)
    for a in result.assignments:
        node = by_id[a.node_id]
        assert node.state == "available"
        assert node.zone == a.zone
        assert node.accelerator == a.accelerator == result.items[a.item_index].accelerator
        assert set(a.card_indices) <= node.free
        for card in a.card_indices:
            assert (a.node_id, card) not in seen, "card assigned twice"
            seen.add((a.node_id, card))
        if request.kind == "bare_metal":
            assert len(node.free) == node.card_count and len(a.card_indices) == node.card_count
        else:
            assert 1 <= len(a.card_indices) <= 8
        per_item[a.item_index] += len(a.card_indices)
    assert per_item == [it.count for it in result.items]
    if request.items:
        assert list(request.items) == result.items
    if request.kind == "container":  # one node per container item, explicit or chosen by a policy
        assert sorted(a.item_index for a in result.assignments) == list(range(len(result.items)))


@SETTINGS
@given(
    st.one_of(
        st.tuples(fleets(), item_requests()),
        st.tuples(fleets(whole=True), item_requests("bare_metal")),  # bare metal needs whole free nodes
    )
)
def test_items_legal_and_complete(case):
    nodes, request = case
    feasible = items_feasible(nodes, request)
    for strategy in STRATEGIES:
        result = place(nodes, request, CATALOG, strategy)
        event(f"{request.kind}: {result.error_code or 'ok'}")
        if result.error_code == "invalid_request":
            continue
        assert result.ok == feasible, (strategy, result.message)
        if result.ok:
            check_legal(nodes, request, result)
        else:
            assert result.error_code == "insufficient_capacity" and result.missing


@SETTINGS
@given(
    st.one_of(
        st.tuples(fleets(), policy_requests()),
        st.tuples(fleets(whole=True), policy_requests("bare_metal")),
    )
)
def test_policy_cheapest(case):
    nodes, request = case
    best = cheapest_mix(nodes, request, CATALOG)
    result = place(nodes, request, CATALOG)
    event(f"policy {request.kind}: {result.error_code or 'ok'}")
    if result.error_code == "invalid_request":
        return
    assert result.ok == (best is not None), result.message
    if result.ok:
        check_legal(nodes, request, result)
        assert result.price_per_hour == best
        assert sum(it.count for it in result.items) == request.policy.total_cards
        assert result.domestic_share >= request.policy.min_domestic_share - 1e-9
        assert all(CATALOG[it.accelerator].vendor in request.policy.compatible_vendors for it in result.items)
        assert len({it.accelerator for it in result.items}) == len(result.items)


@SETTINGS
@given(fleets(), st.lists(item_requests(), min_size=1, max_size=6), st.sampled_from(STRATEGIES))
def test_fleet_churn_never_double_books(nodes, requests, strategy):
    fleet = Fleet(nodes)
    held = []
    for request in requests:
        before = fleet.snapshot()
        result = fleet.place(request, CATALOG, strategy)
        assert fleet.snapshot() == before, "place must not mutate"
        if result.ok:
            check_legal(before, request, result)
            fleet.allocate(result)
            held.extend(result.assignments)
    taken = {(a.node_id, c) for a in held for c in a.card_indices}
    assert len(taken) == sum(len(a.card_indices) for a in held)
    after = {n.id: n.free for n in fleet.snapshot()}
    for node in nodes:
        assert after[node.id] == node.free - {c for nid, c in taken if nid == node.id}
    for a in held:
        fleet.release(a.node_id, a.card_indices)
    assert fleet.snapshot() == nodes
