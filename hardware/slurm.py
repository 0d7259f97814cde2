"""Slurm hybrid partitions: `hybrid-<instance short id>` over an instance's nodes on the configured
controller, plus the `slurm.conf` node lines and an example sbatch header.

`SLURM_SCONTROL` is the scontrol command prefix ("scontrol", or "ssh slurm@ctl scontrol"); empty =
Slurm integration off. The provisioning side calls `partition_create` when a bare-metal instance
goes running and `partition_delete` on stop / terminate; `slurm_partition(...)` is what the API shows.
"""
import re
import shlex
import subprocess
from dataclasses import dataclass

from django.conf import settings

from inventory.choices import NodeState

GRES_BY_VENDOR = {"nvidia": "gpu", "huawei": "npu"}
# What scontrol says when the partition does not exist (so a repeated delete is done, not failed).
_PARTITION_GONE = re.compile(r"invalid partition name|partition \S+ not found", re.IGNORECASE)


@dataclass(frozen=True)
class ScontrolResult:
    """What scontrol printed (never a raised error: the caller decides)."""

    argv: list
    output: str
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def partition_name(instance_id) -> str:
    """`hybrid-` + the first 8 hex digits of the instance id."""
    return f"hybrid-{str(instance_id).replace('-', '')[:8]}"


def slurm_node_name(hostname: str) -> str:
    """Slurm NodeName of a host: its short name (first DNS label)."""
    return hostname.split(".")[0]


def enabled() -> bool:
    """Whether a controller is configured."""
    return bool(settings.SLURM_SCONTROL.strip())


def scontrol(*args: str) -> ScontrolResult:
    """Run `$SLURM_SCONTROL <args>` (locally or over SSH, as configured)."""
    argv = shlex.split(settings.SLURM_SCONTROL) + list(args)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=settings.SLURM_COMMAND_TIMEOUT_SECONDS)
    except FileNotFoundError:
        return ScontrolResult(argv, f"{argv[0]}: command not found", 127)
    except subprocess.TimeoutExpired:
        return ScontrolResult(argv, f"scontrol timed out after {settings.SLURM_COMMAND_TIMEOUT_SECONDS:g} s", 124)
    return ScontrolResult(argv, (proc.stdout + proc.stderr).strip(), proc.returncode)


def partition_create(*, instance_id, hostnames) -> ScontrolResult:
    """`scontrol create PartitionName=hybrid-… Nodes=… State=UP` (an existing one is updated instead)."""
    name = partition_name(instance_id)
    nodes = ",".join(sorted(slurm_node_name(h) for h in hostnames))
    result = scontrol("create", f"PartitionName={name}", f"Nodes={nodes}", "State=UP")
    # A retried step: slurmctld refuses to create a partition that exists ("Invalid partition name").
    if not result.ok and scontrol("show", "partition", name).ok:
        result = scontrol("update", f"PartitionName={name}", f"Nodes={nodes}", "State=UP")
    return result


def partition_delete(*, instance_id) -> ScontrolResult:
    """`scontrol delete PartitionName=hybrid-…`; deleting a partition that is gone counts as done."""
    result = scontrol("delete", f"PartitionName={partition_name(instance_id)}")
    if result.exit_code == 1 and _PARTITION_GONE.search(result.output):
        return ScontrolResult(result.argv, result.output, 0)
    return result


def sbatch_header(*, instance_id, groups) -> str:
    """An example sbatch header: one heterogeneous component per vendor (`groups` = [(vendor, nodes, cards)])."""
    name = partition_name(instance_id)
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}-job"]
    for i, (vendor, nodes, cards) in enumerate(groups):
        if i:
            lines.append("#SBATCH hetjob")
        gres = GRES_BY_VENDOR.get(vendor, "gpu")
        lines += [f"#SBATCH --partition={name}", f"#SBATCH --nodes={nodes}",
                  f"#SBATCH --gres={gres}:{cards}", f"#SBATCH --ntasks-per-node={cards}"]
    return "\n".join(lines) + "\n"


def slurm_partition(*, instance_id, nodes) -> dict | None:
    """The instance API's `slurm_partition`: name, node names and an sbatch header; None when Slurm is off.

    `nodes` are inventory Nodes (with accelerator loaded) of the instance.
    """
    if not enabled() or not nodes:
        return None
    by_vendor: dict[str, list] = {}
    for node in nodes:
        by_vendor.setdefault(node.accelerator.vendor, []).append(node)
    groups = [(vendor, len(members), max(n.card_count for n in members))
              for vendor, members in sorted(by_vendor.items(), key=lambda kv: kv[0] != "huawei")]
    return {"name": partition_name(instance_id),
            "nodes": sorted(slurm_node_name(n.hostname) for n in nodes),
            "sbatch_header": sbatch_header(instance_id=instance_id, groups=groups)}


def nodes_conf_lines(nodes) -> list[str]:
    """`NodeName=… Gres=gpu:8 …` / `Gres=npu:8` lines for slurm.conf (retired nodes left out)."""
    lines = [f"GresTypes={','.join(sorted(set(GRES_BY_VENDOR.values())))}"]
    for node in nodes:
        if node.state == NodeState.RETIRED:
            continue
        gres = GRES_BY_VENDOR.get(node.accelerator.vendor, "gpu")
        lines.append(f"NodeName={slurm_node_name(node.hostname)} NodeHostname={node.hostname} "
                     f"Gres={gres}:{node.card_count} Feature={node.accelerator.slug},{node.zone.slug} State=UNKNOWN")
    return lines
