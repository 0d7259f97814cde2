"""Seed the demo fleet: the catalog, two zones and 24 eight-card nodes (idempotent)."""
from django.core.management.base import BaseCommand
from django.db import transaction

from inventory.catalog_seed import seed_catalog
from inventory.choices import FabricKind
from inventory.models import Accelerator, Node, Zone
from inventory.services import _node_insert

ZONES = [
    # slug, name, fabric, Gbps, inter-node all_reduce floor (GB/s). The name says where; pages add the fabric from
    # its fields (Zone.fabric_label), so a name that repeats it reads twice, and differently.
    ("cn-east-1a", "East China 1a", FabricKind.INFINIBAND, 400, 40),
    ("cn-east-1b", "East China 1b", FabricKind.ROCE, 200, 20),
]
# accelerator slug, short name, nodes per zone (1a, 1b)
FLEET = [
    ("h100-sxm-80g", "h100", (4, 2)),
    ("h800-sxm-80g", "h800", (2, 2)),
    ("a800-sxm-80g", "a800", (3, 3)),
    ("ascend-910b", "910b", (4, 4)),
]
# Logical CPUs and RAM (MiB) per vendor's demo host, shared among containers in proportion to cards: an HGX
# 8-GPU host with two 56-core Xeons (224 threads) and 2 TiB; an Atlas 800T A2 with four 48-core Kunpeng 920 and 1 TiB.
HOST_SIZE = {"nvidia": (224, 2 * 1024 * 1024), "huawei": (192, 1024 * 1024)}


def seed_demo_fleet() -> int:
    """Create what is missing of the demo fleet; returns how many nodes were added."""
    added = 0
    with transaction.atomic():
        seed_catalog()
        zones = []
        for slug, name, fabric, gbps, floor in ZONES:
            zone, _ = Zone.objects.get_or_create(slug=slug, defaults=dict(
                name=name, fabric_kind=fabric, fabric_gbps=gbps, inter_node_floor_gbps=floor))
            zones.append(zone)
        existing = set(Node.objects.values_list("hostname", flat=True))
        accelerators = {a.slug: a for a in Accelerator.objects.all()}
        for acc_slug, short, per_zone in FLEET:
            for zone, count in zip(zones, per_zone, strict=True):
                for i in range(1, count + 1):
                    hostname = f"{short}-{zone.slug}-{i:02d}.demo.cardmix.local"
                    if hostname in existing:
                        continue
                    _node_insert(hostname=hostname, zone=zone, accelerator=accelerators[acc_slug], card_count=8,
                                 driver="simulated", ssh_host=hostname, audit_action="node.seed")
                    added += 1
        # Also demo nodes seeded before hosts had a size (idempotent: only where it is still unknown).
        for vendor, (cpus, mib) in HOST_SIZE.items():
            demo = Node.objects.filter(hostname__endswith=".demo.cardmix.local", accelerator__vendor=vendor)
            demo.filter(cpu_cores__isnull=True).update(cpu_cores=cpus)
            demo.filter(memory_mib__isnull=True).update(memory_mib=mib)
    return added


class Command(BaseCommand):
    help = "Seed the demo fleet (catalog, zones cn-east-1a/1b, 24 simulated 8-card nodes); safe to re-run."

    def handle(self, *args, **options):
        added = seed_demo_fleet()
        total = Node.objects.count()
        self.stdout.write(self.style.SUCCESS(f"Demo fleet: {added} node(s) added, {total} in total."))
