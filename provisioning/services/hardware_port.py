"""The calls provisioning makes into hardware: Slurm partitions for hybrids.

hardware sits below provisioning; the instance never waits on Slurm (what a failure does to the instance —
its state reason, the email, the retry — is services/slurm_partitions.py).
"""
from types import SimpleNamespace
from typing import NamedTuple

from hardware import slurm


class SlurmPart(NamedTuple):
    """One node group as the Slurm side sees it: the node, the cards the group takes there, the node's vendor."""

    hostname: str
    card_count: int
    vendor: str
    cards: int


def slurm_parts(groups) -> list[SlurmPart]:
    """Parts of model NodeGroups (node and its accelerator loaded)."""
    return [SlurmPart(g.node.hostname, g.node.card_count, g.node.accelerator.vendor, len(g.card_indices))
            for g in groups]


def _is_hybrid(parts) -> bool:
    return len({p.vendor for p in parts}) > 1


def slurm_enabled() -> bool:
    return slurm.enabled()


def slurm_partition_name(instance_id) -> str:
    return slurm.partition_name(instance_id)


def slurm_shared_nodes(*, kind: str, parts) -> list[str]:
    """The hostnames a hybrid shares with other tenants while Slurm is on (it gets no partition: one covers whole
    nodes, and a shared node's other cards are other tenants'); [] when it owns them all or is no hybrid."""
    if not slurm.enabled() or not _is_hybrid(parts):
        return []
    return slurm.shared_nodes(kind=kind, parts=[(p.hostname, p.cards, p.card_count) for p in parts])


def slurm_wanted(*, kind: str, parts) -> bool:
    """Whether the instance's placement gets a partition: Slurm on, a hybrid, and only nodes it owns."""
    return slurm_enabled() and _is_hybrid(parts) and not slurm_shared_nodes(kind=kind, parts=parts)


def slurm_account(organization_id) -> str:
    return slurm.account_name(organization_id)


def slurm_partition(*, instance_id, organization_id, kind: str, parts) -> dict | None:
    """The API's `slurm_partition` (None when Slurm is off, for anything but a hybrid, and on shared nodes)."""
    if not slurm_wanted(kind=kind, parts=parts):
        return None
    # hardware.slurm reads hostname, card_count and accelerator.vendor of each distinct node.
    nodes = {p.hostname: SimpleNamespace(hostname=p.hostname, card_count=p.card_count,
                                         accelerator=SimpleNamespace(vendor=p.vendor)) for p in parts}
    return slurm.slurm_partition(instance_id=instance_id, account=slurm_account(organization_id), nodes=list(nodes.values()))


def slurm_partition_create(*, instance_id, organization_id, parts):
    """Create (or bring up to date) the hybrid's partition on the controller → hardware.slurm.ScontrolResult."""
    return slurm.partition_create(instance_id=instance_id, hostnames=sorted({p.hostname for p in parts}),
                                  account=slurm.account_name(organization_id))


def slurm_partition_delete(*, instance_id):
    """Remove the partition named after the instance (one that is gone counts as removed) → ScontrolResult."""
    return slurm.partition_delete(instance_id=instance_id)


def slurm_partitions_listed():
    """(ScontrolResult, {partition name: its fields}) of Cardmix's partitions on the controller."""
    return slurm.partitions_listed()
