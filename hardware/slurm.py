"""Slurm hybrid partitions: `hybrid-<instance short id>` over the nodes an instance owns on the configured
controller, open only to its organization's account (`AllowAccounts=cm-…`), plus the `slurm.conf` node lines
and an sbatch header.

`SLURM_SCONTROL` is the scontrol command prefix ("scontrol", or "ssh slurm@ctl scontrol"); empty =
Slurm integration off. `SLURM_SACCTMGR` (optional) is the sacctmgr prefix that makes sure the account exists
in slurmdbd. The provisioning side (provisioning/services/slurm_partitions.py) calls `partition_create` when a
hybrid goes running, `partition_delete` on stop / terminate, and reconciles what `partitions_listed` shows;
`slurm_partition(...)` is what the API shows.
"""
import re
import shlex
import subprocess
from dataclasses import dataclass

from django.conf import settings

from inventory.choices import NodeState

GRES_BY_VENDOR = {"nvidia": "gpu", "huawei": "npu"}
_PARTITION_NAME = re.compile(r"^hybrid-[0-9a-f]{8}$")  # only ours: an operator's partitions are never touched
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


def account_name(organization_id) -> str:
    """The organization's Slurm account: `cm-` + the first 12 hex digits of its id.

    From the id, not the slug or name, so it never changes; lowercase letters, digits and one hyphen are what
    sacctmgr stores unchanged (it lowercases names) and what a comma-separated AllowAccounts list can hold.
    """
    return f"cm-{str(organization_id).replace('-', '')[:12]}"


def shared_nodes(*, kind: str, parts) -> list[str]:
    """Hostnames of the instance's nodes that other tenants may share; [] = it owns every node it is on.

    `parts` = [(hostname, cards taken, cards on the node)], one per node group (a node may appear twice).
    Bare metal owns its nodes; a container owns a node only when its groups there take every card.
    """
    if kind == "bare_metal":
        return []
    taken, total = {}, {}
    for hostname, cards, card_count in parts:
        taken[hostname] = taken.get(hostname, 0) + cards
        total[hostname] = card_count
    return sorted(h for h in taken if taken[h] < total[h])


def slurm_node_name(hostname: str) -> str:
    """Slurm NodeName of a host: its short name (first DNS label)."""
    return hostname.split(".")[0]


def enabled() -> bool:
    """Whether a controller is configured."""
    return bool(settings.SLURM_SCONTROL.strip())


def scontrol(*args: str) -> ScontrolResult:
    """Run `$SLURM_SCONTROL <args>` (locally or over SSH, as configured)."""
    return _run(shlex.split(settings.SLURM_SCONTROL) + list(args), "scontrol")


def _run(argv: list, what: str) -> ScontrolResult:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=settings.SLURM_COMMAND_TIMEOUT_SECONDS)
    except FileNotFoundError:
        return ScontrolResult(argv, f"{argv[0]}: command not found", 127)
    except subprocess.TimeoutExpired:
        return ScontrolResult(argv, f"{what} timed out after {settings.SLURM_COMMAND_TIMEOUT_SECONDS:g} s", 124)
    return ScontrolResult(argv, (proc.stdout + proc.stderr).strip(), proc.returncode)


def account_ensure(account: str) -> ScontrolResult:
    """`sacctmgr -i add account <account>` when `SLURM_SACCTMGR` is set (one that exists counts as done).

    Unset: the operator keeps the accounts. Without slurmdbd the controller cannot tie a job to an account,
    so a partition with AllowAccounts then accepts submissions but runs none of them (README).
    """
    prefix = settings.SLURM_SACCTMGR.strip()
    if not prefix:
        return ScontrolResult([], "", 0)
    result = _run(shlex.split(prefix) + ["-i", "add", "account", account, "Description=cardmix"],
                  "sacctmgr")
    if not result.ok and re.search(r"already exists|nothing new added", result.output, re.IGNORECASE):
        return ScontrolResult(result.argv, result.output, 0)
    return result


def partition_create(*, instance_id, hostnames, account: str) -> ScontrolResult:
    """`scontrol create PartitionName=hybrid-… Nodes=… AllowAccounts=<account> State=UP` (an existing one is
    updated instead); the account is made sure of first (account_ensure)."""
    ensured = account_ensure(account)
    if not ensured.ok:
        return ensured
    name = partition_name(instance_id)
    nodes = ",".join(sorted(slurm_node_name(h) for h in hostnames))
    fields = (f"Nodes={nodes}", f"AllowAccounts={account}", "State=UP")
    result = scontrol("create", f"PartitionName={name}", *fields)
    # A retried step: slurmctld refuses to create a partition that exists ("Invalid partition name").
    if not result.ok and scontrol("show", "partition", name).ok:
        result = scontrol("update", f"PartitionName={name}", *fields)
    return result


def partitions_listed() -> tuple[ScontrolResult, dict]:
    """Cardmix's partitions on the controller: (the scontrol result, {name: {"AllowAccounts": …, "Nodes": …}})."""
    result = scontrol("--oneliner", "show", "partition")
    listed = {}
    if result.ok:
        for line in result.output.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            if _PARTITION_NAME.match(fields.get("PartitionName", "")):
                listed[fields["PartitionName"]] = fields
    return result, listed


def partition_delete(*, instance_id) -> ScontrolResult:
    """`scontrol delete PartitionName=hybrid-…`; deleting a partition that is gone counts as done."""
    result = scontrol("delete", f"PartitionName={partition_name(instance_id)}")
    if result.exit_code == 1 and _PARTITION_GONE.search(result.output):
        return ScontrolResult(result.argv, result.output, 0)
    return result


def sbatch_header(*, instance_id, account: str, groups) -> str:
    """A ready-to-copy sbatch header: one heterogeneous component per vendor (`groups` = [(vendor, nodes, cards)]),
    NVIDIA cards as `--gpus-per-node`, Ascend ones as the `npu` GRES (Slurm has no native NPU type)."""
    name = partition_name(instance_id)
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}-job"]
    for i, (vendor, nodes, cards) in enumerate(groups):
        if i:
            lines.append("#SBATCH hetjob")
        per_node = f"--gpus-per-node={cards}" if vendor == "nvidia" else f"--gres={GRES_BY_VENDOR.get(vendor, 'gpu')}:{cards}"
        lines.append(f"#SBATCH --partition={name} --account={account} --nodes={nodes} {per_node} "
                     f"--ntasks-per-node={cards}")
    return "\n".join(lines) + "\n"


def slurm_partition(*, instance_id, account: str, nodes) -> dict | None:
    """The instance API's `slurm_partition`: name, account, node names and an sbatch header; None when Slurm is off.

    `nodes` are inventory Nodes (with accelerator loaded) the instance owns.
    """
    if not enabled() or not nodes:
        return None
    by_vendor: dict[str, list] = {}
    for node in nodes:
        by_vendor.setdefault(node.accelerator.vendor, []).append(node)
    groups = [(vendor, len(members), max(n.card_count for n in members))
              for vendor, members in sorted(by_vendor.items(), key=lambda kv: kv[0] != "huawei")]
    return {"name": partition_name(instance_id), "account": account,
            "nodes": sorted(slurm_node_name(n.hostname) for n in nodes),
            "sbatch_header": sbatch_header(instance_id=instance_id, account=account, groups=groups)}


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
