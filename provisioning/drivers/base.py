"""The driver interface: what the platform asks a node to do and what the node printed."""

from __future__ import annotations

import abc
import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NodeRef:
    """A driver's view of one node (plain data, no Django objects)."""

    id: str
    hostname: str
    accelerator: str  # catalog slug, e.g. "h100-sxm-80g"
    vendor: str  # "nvidia" | "huawei" | ...
    collective: str  # "nccl" | "hccl"
    card_count: int = 8
    zone: str = ""
    fabric: str = ""  # e.g. "roce-200g", "ib-400g": the zone's inter-node network
    ssh_host: str = ""
    ssh_port: int = 22
    cpu_cores: int | None = None  # the host's logical CPUs and RAM: a container's share follows its cards
    memory_mib: int | None = None


@dataclass
class DriverOutput:
    """What a node printed for one operation. Never a verdict: the platform parses and decides."""

    text: str
    exit_code: int
    duration_s: float
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The command exited 0 (a fact about the process, not a readiness verdict)."""
        return self.exit_code == 0


class Driver(abc.ABC):
    """Provision, test and release nodes; every method returns DriverOutput."""

    name: str = ""

    @abc.abstractmethod
    def prepare(
        self,
        node: NodeRef,
        cards: Sequence[int],
        *,
        kind: str,
        image: str,
        ssh_keys: Sequence[str],
        env: Mapping[str, str],
        instance_id: str,
        ssh_port: int | None = None,
        cluster: Mapping[str, Any] | None = None,
        storage: Mapping[str, Any] | None = None,
        registry_auth: Mapping[str, Any] | None = None,
    ) -> DriverOutput:
        """Start a container on `cards` (kind="container") or deploy the whole node (kind="bare_metal").

        A container's sshd is published on the node at `ssh_port` (its own network namespace, not the host's).
        `cluster`: this part's view of its multi-part instance (provisioning/services/cluster.py part_view): the
        network to join or set up, its address and the hostfile every part gets. `storage`: `{"storage_root",
        "volumes": [{"id", "kind", "dir", "mount_path", "read_only", "size_bytes"}]}` (storage/agent_port.py), the
        volumes and datasets to mount. `registry_auth`: the login a private `image` is pulled with
        (inventory/custom_images.py pull_auth: `{"registry", "username", "sealed"}`, opened only as the node gets it).
        """

    def image_save(self, node: NodeRef, *, container: str, reference: str,
                   registry_auth: Mapping[str, Any] | None = None, timeout_s: float = 3600.0) -> DriverOutput:
        """"Save as image": commit `container` as `reference` and push it with `registry_auth` (sealed); meta may
        carry the pushed `digest`. Drivers without containers to save answer exit 2."""
        return DriverOutput(f"{node.hostname}: the {self.name} driver cannot save a container as an image\n", 2,
                            0.0, {})

    @abc.abstractmethod
    def readiness(self, node: NodeRef, cards: Sequence[int]) -> DriverOutput:
        """Run the intra-node all_reduce test over `cards`; meta carries command, tool and ranks."""

    @abc.abstractmethod
    def health_check(self, node: NodeRef, card: int) -> DriverOutput:
        """Device health report for a one-card group (no collective to test)."""

    @abc.abstractmethod
    def inter_node(self, nodes: Sequence[NodeRef], cards_per_node: int, *,
                   cards: Sequence[Sequence[int]] | None = None) -> DriverOutput:
        """Multi-node all_reduce across `nodes` (nccl-tests / hccl_test format); `cards[i]`: node i's cards
        (a container's own), else its first `cards_per_node`."""

    def reachability(self, nodes: Sequence[NodeRef], cluster: Mapping[str, Any], *,
                     timeout_s: float = 60.0) -> DriverOutput:
        """TCP from each part of `cluster` (a cluster plan) to every other part's address and probe port, one line
        per probe (`reach part I (ADDR) -> part J ADDR:PORT ok N ms` / `FAILED why`); `nodes`: the parts' nodes."""
        return DriverOutput(f"the {self.name} driver cannot probe a cluster's network\n", 69, 0.0, {})

    @abc.abstractmethod
    def topology(self, node: NodeRef) -> DriverOutput:
        """Intra-node topology as the node reports it (nvidia-smi topo -m / npu-smi info -t topo)."""

    @abc.abstractmethod
    def release(self, node: NodeRef, cards: Sequence[int], *, instance_id: str) -> DriverOutput:
        """Stop the container on `cards`, or power the node down when no cards are given (bare metal).

        Releasing what is not there succeeds: the platform also releases a group whose prepare may
        have been cut short. A container goes with its disk: nothing of it is kept (provisioning/stop_keeps.py).
        """

    @abc.abstractmethod
    def install_keys(self, node: NodeRef, *, instance_id: str, ssh_keys: Sequence[str]) -> DriverOutput:
        """Hand-over of a node deployed before its tenant was known (the warm pool): make `ssh_keys` (the users'
        keys chosen at create and the instance's platform key) root's authorized_keys on the running OS, replacing
        whatever keys an earlier hand-over put there. A bare-metal release (`release` with no cards) or the node's
        wipe takes them away again."""

    @abc.abstractmethod
    def wipe(self, node: NodeRef) -> DriverOutput:
        """Erase a node's local disks before it is handed to another tenant."""


def container_name(instance_id: str, cards: Sequence[int]) -> str:
    """A container's name on its node: one instance may hold two groups (two containers) on one node,
    and a group's first card is its own while it lives."""
    return f"cardmix-{instance_id}-{min(cards)}" if cards else f"cardmix-{instance_id}"


def key_fingerprint(line: str) -> str:
    """`SHA256:…` of an authorized_keys line, as ssh-keygen -l prints it ("?" when it is not one)."""
    parts = line.split()
    try:
        blob = base64.b64decode(parts[1], validate=True) if len(parts) >= 2 else b""
    except (binascii.Error, ValueError):
        blob = b""
    if not blob:
        return "?"
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


# Commands per SPEC §3; kept here so every driver (simulated, agent, redfish) runs the same test.
def readiness_command(collective: str, n_cards: int) -> tuple[str, str]:
    """(command line, tool name) of the intra-node readiness test for `n_cards` cards."""
    if collective == "hccl":
        return f"all_reduce_test -b 8G -e 8G -p {n_cards}", "hccl_test"
    return f"all_reduce_perf -b 8G -e 8G -f 2 -g {n_cards} -c 1", "nccl-tests"
