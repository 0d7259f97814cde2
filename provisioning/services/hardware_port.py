"""The calls provisioning makes into hardware: Slurm partitions for hybrids.

hardware sits below provisioning; every call is best-effort, the instance never waits on Slurm.
"""
import logging

logger = logging.getLogger("cardmix.provisioning")


def _is_hybrid(nodes) -> bool:
    return len({n.accelerator.vendor for n in nodes}) > 1


def slurm_partition(*, instance_id, nodes) -> dict | None:
    """The API's `slurm_partition` for a hybrid instance (None when Slurm is off or not hybrid)."""
    if not _is_hybrid(nodes):
        return None
    from hardware.slurm import slurm_partition as partition

    return partition(instance_id=instance_id, nodes=nodes)


def slurm_partition_create(*, instance_id, nodes) -> None:
    """Create the hybrid's partition when it starts running (a failure is logged, never fatal)."""
    from hardware import slurm

    if not slurm.enabled() or not _is_hybrid(nodes):
        return
    result = slurm.partition_create(instance_id=instance_id, hostnames=[n.hostname for n in nodes])
    if result.exit_code:
        logger.warning("slurm partition create failed", extra={"instance": str(instance_id), "out": result.output})


def slurm_partition_delete(*, instance_id, nodes) -> None:
    """Remove the hybrid's partition when its nodes are released."""
    from hardware import slurm

    if not slurm.enabled() or not _is_hybrid(nodes):
        return
    result = slurm.partition_delete(instance_id=instance_id)
    if result.exit_code:
        logger.warning("slurm partition delete failed", extra={"instance": str(instance_id), "out": result.output})
