"""Unit tests of the placement engine: validation, zones, kinds, node states, strategies, policy mode."""

from __future__ import annotations

import subprocess
import sys

import pytest

from provisioning.placement import (
    AcceleratorInfo,
    Fleet,
    Item,
    NodeSnapshot,
    PlacementRequest,
    Policy,
    Workload,
    place,
)

CATALOG = [
    AcceleratorInfo("h800", "nvidia", False, 20_000_000),
    AcceleratorInfo("h20", "nvidia", False, 9_000_000),
    AcceleratorInfo("910b", "huawei", True, 12_000_000),
    AcceleratorInfo("t4", "nvidia", False, 2_000_000),
]
ALL = frozenset(range(8))


def node(id, zone="z1", acc="h800", size=8, free=None, state="available"):
    return NodeSnapshot(
        id, zone, acc, size, frozenset(range(size)) if free is None else frozenset(free), state
    )


def container(*items, zone=None):
    return PlacementRequest("container", tuple(Item(a, c) for a, c in items), zone=zone)


def bare(*items, zone=None):
    return PlacementRequest("bare_metal", tuple(Item(a, c) for a, c in items), zone=zone)


def nodes_used(result):
    return sorted(a.node_id for a in result.assignments)


# -- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "fragment"),
    [
        (container(("nope", 1)), "unknown accelerator"),
        (container(("h800", 0)), ">= 1"),
        (container(("h800", 9)), "at most 8"),
        (container(("t4", 3)), "at most 2 cards"),
        (bare(("h800", 12)), "multiple of 8"),
        (PlacementRequest("container"), "either items or a policy"),
        (PlacementRequest("container", (Item("h800", 1),), Policy(1, ("nvidia",), 0.0)), "either items"),
        (PlacementRequest("vm", (Item("h800", 1),)), "unknown kind"),
        (PlacementRequest("container", policy=Policy(0, ("nvidia",), 0.0)), "total_cards"),
        (PlacementRequest("container", policy=Policy(8, ("nvidia",), 1.5)), "min_domestic_share"),
        (PlacementRequest("container", policy=Policy(8, (), 0.0)), "compatible_vendors"),
        (PlacementRequest("container", policy=Policy(8, ("intel",), 0.0)), "no accelerator"),
    ],
)
def test_invalid_requests(request_, fragment):
    result = place([node("a"), node("t", acc="t4", size=2)], request_, CATALOG)
    assert not result.ok and result.error_code == "invalid_request"
    assert fragment in result.message


@pytest.mark.parametrize("request_", [container(("h800", 1), zone="mars"),
                                      PlacementRequest("container", policy=Policy(2, ("nvidia",), 0.0), zone="mars")])
def test_a_zone_without_nodes_in_the_snapshot_has_no_capacity(request_):
    # The caller's snapshot may hold only some accelerators; a zone missing from it has none of them free.
    result = place([node("a")], request_, CATALOG)
    assert not result.ok and result.error_code == "insufficient_capacity"


def test_unknown_strategy_is_a_programming_error():
    with pytest.raises(ValueError):
        place([node("a")], container(("h800", 1)), CATALOG, strategy="random")


# -- zones, kinds, states -----------------------------------------------------------------------------


def test_zone_pinning_restricts_everything():
    nodes = [node("a", "z1"), node("b", "z2", free={0})]
    result = place(nodes, container(("h800", 2), zone="z2"), CATALOG)
    assert result.error_code == "insufficient_capacity" and result.missing == {"h800": 1}  # 1 free on b
    result = place(nodes, container(("h800", 1), zone="z2"), CATALOG)
    assert result.ok and nodes_used(result) == ["b"]


def test_hybrid_lands_in_one_zone():
    nodes = [
        node("a", "z1", "h800"),
        node("b", "z2", "910b"),
        node("c", "z3", "h800"),
        node("d", "z3", "910b"),
    ]
    result = place(nodes, container(("h800", 8), ("910b", 8)), CATALOG)
    assert result.ok and {a.zone for a in result.assignments} == {"z3"}
    assert [(a.item_index, a.node_id, len(a.card_indices)) for a in result.assignments] == [
        (0, "c", 8),
        (1, "d", 8),
    ]


def test_hybrid_needs_every_part_in_the_same_zone():
    nodes = [node("a", "z1", "h800"), node("b", "z2", "910b")]
    result = place(nodes, container(("h800", 1), ("910b", 1)), CATALOG)
    assert result.error_code == "insufficient_capacity" and sum(result.missing.values()) == 1


def test_bare_metal_takes_only_whole_free_nodes():
    nodes = [node("part", free={1, 2, 3, 4, 5, 6, 7}), node("w1"), node("w2"), node("w3", state="draining")]
    result = place(nodes, bare(("h800", 16)), CATALOG)
    assert result.ok and nodes_used(result) == ["w1", "w2"]
    assert all(a.card_indices == tuple(range(8)) for a in result.assignments)
    assert place(nodes, bare(("h800", 24)), CATALOG).missing == {"h800": 8}  # two whole nodes of three


def test_missing_counts_only_the_cards_beyond_what_would_fit():
    """Sold out is not 'none free': 28 H800 free as 7 per node leave an 8-card container 1 short, not 8; a
    hybrid names only the part that does not fit."""
    nodes = [node(f"n{i}", free=set(range(7))) for i in range(4)] + [node("a", acc="910b", free={0, 1})]
    assert place(nodes, container(("h800", 8)), CATALOG).missing == {"h800": 1}
    assert place(nodes, container(("h800", 4), ("910b", 3)), CATALOG).missing == {"910b": 1}
    whole = [node("w1"), node("w2"), node("p", free={0})]
    assert place(whole, bare(("h800", 32)), CATALOG).missing == {"h800": 16}


def test_unavailable_nodes_receive_nothing():
    nodes = [node("m", state="maintenance"), node("q", state="quarantined"), node("ok", free={0})]
    assert nodes_used(place(nodes, container(("h800", 1)), CATALOG)) == ["ok"]
    assert place(nodes, container(("h800", 2)), CATALOG).error_code == "insufficient_capacity"


def test_two_items_may_share_a_node_without_sharing_cards():
    result = place([node("a")], container(("h800", 3), ("h800", 5)), CATALOG)
    assert result.ok and nodes_used(result) == ["a", "a"]
    cards = [c for a in result.assignments for c in a.card_indices]
    assert sorted(cards) == list(range(8))


def test_backtracking_finds_the_packing_greedy_misses():
    # Greedy largest-first best-fit puts 3 on the 4-free node, stranding one of the 2s.
    nodes = [node("four", size=4), node("three", size=4, free={0, 1, 2})]
    result = place(nodes, container(("h800", 3), ("h800", 2), ("h800", 2)), CATALOG, "spread")
    assert result.ok and sorted(len(a.card_indices) for a in result.assignments) == [2, 2, 3]


# -- strategies ---------------------------------------------------------------------------------------


def test_strategies_choose_differently():
    nodes = [node("empty"), node("half", free={4, 5, 6, 7}), node("tight", free={6, 7})]
    picks = {
        s: nodes_used(place(nodes, container(("h800", 2)), CATALOG, s))
        for s in ("best_fit", "first_fit", "spread", "ours")
    }
    assert picks == {"best_fit": ["tight"], "first_fit": ["empty"], "spread": ["empty"], "ours": ["tight"]}


def test_ours_keeps_flexible_requests_off_accelerators_constrained_work_needs():
    nodes = [node("t4", acc="t4", size=2, free={1}), node("g", acc="h20")]
    workload = Workload(sizes={1: 1.0}, constrained={frozenset({"t4"}): 0.5})
    fleet = Fleet(nodes, workload)
    assert fleet.place_any(1, None, "best_fit").assignments[0].node_id == "t4"
    assert fleet.place_any(1, None, "ours").assignments[0].node_id == "g"


def test_place_does_not_mutate_and_allocate_release_round_trip():
    fleet = Fleet([node("a"), node("b", free={0, 1})])
    before = fleet.snapshot()
    result = fleet.place(container(("h800", 2)), CATALOG)
    assert fleet.snapshot() == before
    fleet.allocate(result)
    with pytest.raises(ValueError):
        fleet.allocate(result)  # the same cards twice
    assert fleet.place(container(("h800", 8)), CATALOG).ok
    a = result.assignments[0]
    fleet.release(a.node_id, a.card_indices)
    assert fleet.snapshot() == before
    with pytest.raises(ValueError):
        fleet.release(a.node_id, a.card_indices)  # already free


# -- policy mode --------------------------------------------------------------------------------------


def test_policy_picks_cheapest_mix_meeting_domestic_share():
    nodes = [node("h", acc="h800"), node("g", acc="h20", free={0, 1, 2, 3}), node("d", acc="910b")]
    request = PlacementRequest("container", policy=Policy(8, ("nvidia", "huawei"), 0.5))
    result = place(nodes, request, CATALOG)
    # 4 domestic 910b (12 M) are required; the other 4 are cheapest on h20 (9 M).
    assert result.ok and sorted((i.accelerator, i.count) for i in result.items) == [("910b", 4), ("h20", 4)]
    assert result.price_per_hour == 4 * 12_000_000 + 4 * 9_000_000
    assert result.domestic_share == 0.5


def test_policy_prefers_fewer_types_on_equal_price():
    catalog = [AcceleratorInfo("x", "v", False, 5), AcceleratorInfo("y", "v", False, 5)]
    nodes = [node("x1", acc="x", free={0, 1, 2}), node("y1", acc="y")]
    result = place(nodes, PlacementRequest("container", policy=Policy(6, ("v",), 0.0)), catalog)
    assert result.ok and [(i.accelerator, i.count) for i in result.items] == [("y", 6)]


def test_policy_container_parts_each_sit_on_one_node():
    nodes = [node(f"n{i}", acc="910b") for i in range(3)]
    result = place(nodes, PlacementRequest("container", policy=Policy(8, ("huawei",), 1.0)), CATALOG)
    assert result.ok and [len(a.card_indices) for a in result.assignments] == [8]
    assert result.domestic_share == 1.0
    # Two half-free nodes hold 8 free cards, but no node holds 8: no container of 8 spread over two.
    halves = [node("a", acc="910b", free={0, 1, 2, 3}), node("b", acc="910b", free={4, 5, 6, 7})]
    refused = place(halves, PlacementRequest("container", policy=Policy(8, ("huawei",), 1.0)), CATALOG)
    assert refused.error_code == "insufficient_capacity"
    assert place(halves, PlacementRequest("container", policy=Policy(4, ("huawei",), 1.0)), CATALOG).ok


def test_policy_container_larger_than_one_node_per_accelerator_is_invalid():
    nodes = [node(f"n{i}", acc="910b") for i in range(3)]
    result = place(nodes, PlacementRequest("container", policy=Policy(20, ("huawei",), 1.0)), CATALOG)
    assert result.error_code == "invalid_request" and "bare_metal" in result.message


def test_policy_bare_metal_uses_whole_nodes_and_reports_missing():
    nodes = [node("a", acc="910b"), node("b", acc="910b", free={0})]
    request = PlacementRequest("bare_metal", policy=Policy(16, ("huawei",), 0.0))
    result = place(nodes, request, CATALOG)
    assert result.error_code == "insufficient_capacity" and result.missing == {"total": 8}
    assert place(nodes, PlacementRequest("bare_metal", policy=Policy(8, ("huawei",), 0.0)), CATALOG).ok


def test_engine_imports_nothing_from_django():
    code = (
        "import sys, provisioning.placement; sys.exit(any(m.split('.')[0] == 'django' for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
