"""The seeded catalog, prices, stock and the placement snapshot."""
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from inventory import selectors
from inventory.catalog_seed import CATALOG_EPOCH
from inventory.choices import CardHealth, NodeState
from inventory.models import Accelerator, Card, Image, Node, Price, Zone
from tests.factories.inventory import CardAllocationFactory, NodeFactory, ZoneFactory, accelerator

pytestmark = pytest.mark.django_db


def test_migration_seeds_the_spec_catalog_exactly():
    if not Accelerator.objects.exists():  # an earlier transactional test flushed the migration's rows
        from inventory.catalog_seed import seed_catalog

        seed_catalog()
    rows = {a.slug: a for a in Accelerator.objects.all()}
    assert set(rows) == {"h100-sxm-80g", "h800-sxm-80g", "a800-sxm-80g", "ascend-910b", "mtt-s4000", "bi-v100"}
    h100 = rows["h100-sxm-80g"]
    assert (h100.name, h100.vendor, h100.domestic, h100.memory_gb, h100.collective, h100.readiness_floor_gbps,
            h100.orderable) == ("NVIDIA H100 SXM 80GB", "nvidia", False, 80, "nccl", 235, True)
    assert (rows["ascend-910b"].vendor, rows["ascend-910b"].domestic, rows["ascend-910b"].collective,
            rows["ascend-910b"].memory_gb, rows["ascend-910b"].readiness_floor_gbps) == ("huawei", True, "hccl", 64, 100)
    for slug in ("mtt-s4000", "bi-v100"):
        assert rows[slug].domestic and not rows[slug].orderable
        assert not Price.objects.filter(accelerator=rows[slug]).exists()
    assert selectors.current_prices() == {
        "h100-sxm-80g": (1_900_000, 1_235_000),
        "h800-sxm-80g": (6_800_000, 4_420_000),
        "a800-sxm-80g": (2_000_000, 1_300_000),
        "ascend-910b": (2_400_000, 1_560_000),
    }
    assert Price.objects.get(accelerator=h100).monthly_per_card_hour == 1_235_000
    assert Price.objects.get(accelerator=rows["h800-sxm-80g"]).monthly_per_card_hour is None
    images = {i.slug: i.vendors for i in Image.objects.all()}
    assert images == {"pytorch-2.3-cuda12.3": ["nvidia"], "deepspeed": ["nvidia"], "megatron-lm": ["nvidia"],
                      "llama-factory": ["nvidia"], "cann-torch-npu": ["huawei"]}
    assert "NCCL 2.21" in Image.objects.get(slug="pytorch-2.3-cuda12.3").description


def test_current_price_follows_effective_from_and_monthly_default(settings):
    h800 = accelerator("h800-sxm-80g")
    assert selectors.current_price(h800) == (6_800_000, 4_420_000)
    assert selectors.current_price("h800-sxm-80g") == selectors.current_price(h800.pk)
    later = timezone.now() + timedelta(days=1)
    Price.objects.create(accelerator=h800, on_demand_per_card_hour=7_000_001, effective_from=later)
    assert selectors.current_price(h800) == (6_800_000, 4_420_000)  # not yet in effect
    assert selectors.current_price(h800, at=later) == (7_000_001, 4_550_000)  # floor(7.000001 × 0.65)
    assert selectors.current_prices(at=later)["h800-sxm-80g"] == (7_000_001, 4_550_000)
    settings.MONTHLY_DISCOUNT = 0.5
    assert selectors.current_price(h800) == (6_800_000, 3_400_000)
    with pytest.raises(selectors.PriceMissing) as err:
        selectors.current_price("mtt-s4000")
    assert err.value.details == {"accelerator": ["mtt-s4000 is not orderable."]}
    with pytest.raises(selectors.PriceMissing):
        selectors.current_price(h800, at=CATALOG_EPOCH - timedelta(seconds=1))


def test_stock_counts_allocations_drained_nodes_and_failed_cards():
    zone_a, zone_b = ZoneFactory(slug="za"), ZoneFactory(slug="zb")
    h100, b910 = accelerator("h100-sxm-80g"), accelerator("ascend-910b")
    n1 = NodeFactory(zone=zone_a, accelerator=h100)
    n2 = NodeFactory(zone=zone_b, accelerator=h100)
    drained = NodeFactory(zone=zone_a, accelerator=h100, state=NodeState.DRAINING)
    retired = NodeFactory(zone=zone_a, accelerator=h100, state=NodeState.RETIRED)
    NodeFactory(zone=zone_b, accelerator=b910, card_count=4)
    cards1 = list(n1.cards.order_by("index"))
    for card in cards1[:3]:
        CardAllocationFactory(card=card)
    CardAllocationFactory(card=cards1[3], released_at=timezone.now())  # released: free again
    Card.objects.filter(pk=cards1[7].pk).update(health=CardHealth.FAILED)
    Card.objects.filter(node=n2, index=0).update(health=CardHealth.DEGRADED)
    CardAllocationFactory(card=drained.cards.get(index=0))
    assert retired.cards.count() == 8

    with CaptureQueriesContext(connection) as ctx:
        stock = selectors.stock_by_accelerator()
    assert len(ctx.captured_queries) == 1
    # n1: 8 − 3 held − 1 failed = 4; n2: 8 − 1 degraded = 7; drained node: nothing available.
    assert stock["h100-sxm-80g"] == {"available_cards": 11, "allocated_cards": 4, "total_cards": 24}
    assert stock["ascend-910b"] == {"available_cards": 4, "allocated_cards": 0, "total_cards": 4}
    assert stock["bi-v100"] == {"available_cards": 0, "allocated_cards": 0, "total_cards": 0}
    assert selectors.stock_by_accelerator(zone="zb")["h100-sxm-80g"] == {
        "available_cards": 7, "allocated_cards": 0, "total_cards": 8}
    assert selectors.stock_by_accelerator(zone=zone_a)["h100-sxm-80g"]["total_cards"] == 16
    with CaptureQueriesContext(connection) as ctx:
        by_zone = selectors.stock_by_zone()
    assert len(ctx.captured_queries) == 1
    assert by_zone[("za", "h100-sxm-80g")] == {"available_cards": 4, "allocated_cards": 4, "total_cards": 16}
    assert by_zone[("zb", "ascend-910b")]["available_cards"] == 4
    assert by_zone[("za", "ascend-910b")]["total_cards"] == 0


def test_placement_snapshot_in_two_queries_whatever_the_fleet_size():
    zone = ZoneFactory(slug="snap")
    h100, a800 = accelerator("h100-sxm-80g"), accelerator("a800-sxm-80g")
    node = NodeFactory(zone=zone, accelerator=h100, hostname="aaa.test")
    CardAllocationFactory(card=node.cards.get(index=2))
    Card.objects.filter(node=node, index=5).update(health=CardHealth.FAILED)
    NodeFactory(zone=zone, accelerator=a800, state=NodeState.QUARANTINED)
    NodeFactory(zone=zone, accelerator=a800, state=NodeState.RETIRED)

    def measure():
        with CaptureQueriesContext(connection) as ctx:
            snap = selectors.placement_snapshot(zone="snap")
        return snap, len(ctx.captured_queries)

    snap, few = measure()
    assert [s["state"] for s in snap] == [NodeState.AVAILABLE, NodeState.QUARANTINED]
    first = snap[0]
    assert first == {"id": node.pk, "zone": "snap", "accelerator": "h100-sxm-80g", "card_count": 8,
                     "free": frozenset({0, 1, 3, 4, 6, 7}), "state": "available"}
    for _ in range(30):
        NodeFactory(zone=zone, accelerator=h100)
    snap, many = measure()
    assert len(snap) == 32 and few == many <= 2
    only = selectors.placement_snapshot(accelerators=[a800])
    assert {s["accelerator"] for s in only} == {"a800-sxm-80g"}
    assert selectors.placement_snapshot(zone=ZoneFactory(slug="empty")) == []


def test_seed_demo_fleet_is_idempotent():
    call_command("seed_demo_fleet")
    first = (Node.objects.count(), Card.objects.count(), Zone.objects.count(), Accelerator.objects.count(),
             Price.objects.count(), Image.objects.count())
    call_command("seed_demo_fleet")
    again = (Node.objects.count(), Card.objects.count(), Zone.objects.count(), Accelerator.objects.count(),
             Price.objects.count(), Image.objects.count())
    assert first == again
    assert first[0] == 24 and first[1] == 24 * 8 and first[2] == 2
    stock = selectors.stock_by_accelerator()
    assert {slug: s["total_cards"] for slug, s in stock.items()} == {
        "h100-sxm-80g": 48, "h800-sxm-80g": 32, "a800-sxm-80g": 48, "ascend-910b": 64}
    assert set(Zone.objects.values_list("slug", "fabric_kind", "fabric_gbps")) == {
        ("cn-east-1a", "infiniband", 400), ("cn-east-1b", "roce", 200)}
    assert Node.objects.filter(zone__slug="cn-east-1b", accelerator__slug="ascend-910b").count() == 4


def test_the_demo_fleet_knows_each_hosts_cpus_and_memory():
    """Their containers get CPU and memory in proportion to cards (provisioning/card_share.py); a demo node seeded
    before nodes had a size gets one on the next seed, and an operator's value stands."""
    call_command("seed_demo_fleet")
    sizes = set(Node.objects.values_list("accelerator__vendor", "cpu_cores", "memory_mib"))
    assert sizes == {("nvidia", 224, 2 * 1024 * 1024), ("huawei", 192, 1024 * 1024)}
    old, mine = Node.objects.order_by("hostname")[:2]
    Node.objects.filter(pk=old.pk).update(cpu_cores=None, memory_mib=None)
    Node.objects.filter(pk=mine.pk).update(cpu_cores=200)
    call_command("seed_demo_fleet")
    assert Node.objects.get(pk=old.pk).cpu_cores == old.cpu_cores and Node.objects.get(pk=mine.pk).cpu_cores == 200
