"""Driver access per node: which driver, the node as the driver sees it, and DB-forced simulated faults."""
from django.conf import settings
from django.db import transaction
from django.db.models import F

from inventory.models import Node

from ..choices import InstanceKind
from ..drivers import Driver, NodeRef, get_driver
from ..models import SimulatedFault


def driver_for(node: Node) -> Driver:
    """The node's driver (Node.driver, else settings.PROVISIONING_DRIVER) configured from settings."""
    name = node.driver or settings.PROVISIONING_DRIVER
    if name == "simulated":
        return get_driver(name, profile=settings.SIMULATOR_PROFILE, delay_scale=settings.SIMULATOR_DELAY_SCALE,
                          failure_rate_scale=settings.SIMULATOR_FAILURE_SCALE)
    return get_driver(name)


def node_ref(node: Node) -> NodeRef:
    """A plain-data view of a node (needs zone and accelerator loaded)."""
    zone, acc = node.zone, node.accelerator
    return NodeRef(id=str(node.pk), hostname=node.hostname, accelerator=acc.slug, vendor=acc.vendor,
                   collective=acc.collective, card_count=node.card_count, zone=zone.slug,
                   fabric=f"{zone.fabric_kind}-{zone.fabric_gbps}g", ssh_host=node.ssh_host or node.hostname,
                   ssh_port=node.ssh_port, cpu_cores=node.cpu_cores, memory_mib=node.memory_mib)


def release_cards(instance, group) -> list[int]:
    """The card list a driver release gets: the container's cards, or none (bare metal: the whole node)."""
    return group.card_indices if instance.kind == InstanceKind.CONTAINER else []


def driver_touched(group) -> bool:
    """A prepare was started for this group, so something may run on its node: release must reach the
    driver. prepare_started_at is written before each call, so a worker that died inside one counts too."""
    return group.prepared_at is not None or group.prepare_started_at is not None


def forced_faults(driver: Driver, node_ids, operation: str) -> dict:
    """`{"forced_faults": [...]}` for a simulated driver call, consuming SimulatedFault rows; else {}."""
    if driver.name != "simulated":
        return {}
    with transaction.atomic():
        rows = list(SimulatedFault.objects.select_for_update().filter(node_id__in=list(node_ids),
                                                                      operation=operation).order_by("pk"))
        faults: list[str] = []
        for row in rows:
            if row.remaining is not None and row.remaining <= 0:
                continue
            faults.extend(row.faults)
            if row.remaining is not None:
                SimulatedFault.objects.filter(pk=row.pk).update(remaining=F("remaining") - 1)
    return {"forced_faults": sorted(set(faults))} if faults else {}


def fault_force(*, node, operation: str, faults, times: int | None = None) -> SimulatedFault:
    """Make the next `times` (None: every) simulated `operation` calls on `node` fail with `faults`."""
    return SimulatedFault.objects.create(node=node, operation=operation, faults=list(faults), remaining=times)


def instance_env(*, instance_id: str, collective: str, cards) -> dict[str, str]:
    """Environment injected into the machine: NCCL for NVIDIA, HCCL for Ascend (SPEC §1)."""
    devices = ",".join(str(c) for c in cards)
    env = {"CARDMIX_INSTANCE_ID": instance_id}
    if collective == "hccl":
        env.update(ASCEND_RT_VISIBLE_DEVICES=devices, HCCL_CONNECT_TIMEOUT="600", HCCL_EXEC_TIMEOUT="1800",
                   HCCL_IF_BASE_PORT="60000")
    else:
        env.update(CUDA_VISIBLE_DEVICES=devices, NCCL_IB_DISABLE="0", NCCL_NET_GDR_LEVEL="PHB",
                   NCCL_DEBUG="WARN")
    return env
