"""The instance page's Slurm card: the hybrid's partition with a ready-to-copy sbatch header, or why it has none."""
from django.utils.translation import gettext_lazy

from provisioning.choices import InstanceState as S
from provisioning.services import hardware_port
from provisioning.services.slurm_partitions import SLURM_FAILURE

SHARED_NODES = (gettext_lazy("No Slurm partition: its container parts share nodes with other tenants, and a partition can only "
                "cover whole nodes. Bare metal, or containers taking every card of their nodes, get one."))


def slurm_section(instance) -> dict | None:
    """What the card shows for a decorated instance (`.api`, live groups prefetched); None: no card (Slurm off,
    not a hybrid, or no cards placed now)."""
    groups = getattr(instance, "live_groups", None) or []
    partition = instance.api.get("slurm_partition")
    shared = [] if partition else hardware_port.slurm_shared_nodes(kind=instance.kind,
                                                                    parts=hardware_port.slurm_parts(groups))
    refusal = SHARED_NODES if shared else ""
    if not partition and not refusal:
        return None
    return {"partition": partition, "refusal": refusal, "running": instance.state == S.RUNNING,
            "failed": instance.state_reason.startswith(SLURM_FAILURE)}
