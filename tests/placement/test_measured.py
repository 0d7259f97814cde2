"""Measured quality: multi-node and bare-metal requests prefer nodes whose last busbw is far above the floor."""
from __future__ import annotations

from provisioning.placement import AcceleratorInfo, Fleet, Item, NodeSnapshot, PlacementRequest, place

CATALOG = [AcceleratorInfo("h100", "nvidia", False, 19_000_000)]


def node(id, headroom=0.0, free=range(8), zone="z1"):
    return NodeSnapshot(id, zone, "h100", 8, frozenset(free), "available", headroom)


def nodes_of(result) -> list:
    return [a.node_id for a in result.assignments]


def test_bare_metal_takes_the_node_measured_furthest_above_the_floor():
    fleet = [node("a", 1.05), node("b", 2.0), node("c", 1.4), node("d")]
    assert nodes_of(place(fleet, PlacementRequest("bare_metal", (Item("h100", 8),)), CATALOG)) == ["b"]
    two = place(fleet, PlacementRequest("bare_metal", (Item("h100", 16),)), CATALOG)
    assert sorted(nodes_of(two)) == ["b", "c"]


def test_unmeasured_nodes_come_last_and_keep_their_order():
    fleet = [node("a"), node("b"), node("c", 1.2)]
    assert nodes_of(place(fleet, PlacementRequest("bare_metal", (Item("h100", 16),)), CATALOG)) == ["a", "c"]
    assert nodes_of(place([node("a"), node("b")], PlacementRequest("bare_metal", (Item("h100", 8),)), CATALOG)) == ["a"]


def test_a_multi_node_container_prefers_measured_nodes_a_single_one_keeps_its_choice():
    fleet = [node("a", 1.1), node("b", 1.9), node("c", 1.5)]
    multi = PlacementRequest("container", (Item("h100", 8), Item("h100", 8)))
    assert sorted(nodes_of(place(fleet, multi, CATALOG))) == ["b", "c"]
    single = PlacementRequest("container", (Item("h100", 8),))
    assert nodes_of(place(fleet, single, CATALOG)) == ["a"]  # one node: packing decides, as before


def test_first_fit_ignores_measurements_and_fleet_snapshots_keep_them():
    fleet = [node("a", 1.1), node("b", 1.9)]
    bare = PlacementRequest("bare_metal", (Item("h100", 8),))
    assert nodes_of(place(fleet, bare, CATALOG, strategy="first_fit")) == ["a"]
    f = Fleet(fleet)
    f.allocate(f.place(bare, CATALOG))
    assert {n.id: n.busbw_headroom for n in f.snapshot()} == {"a": 1.1, "b": 1.9}
    assert nodes_of(f.place(bare, CATALOG)) == ["a"]  # b is taken now
