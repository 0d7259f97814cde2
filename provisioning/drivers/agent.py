"""Agent driver: each operation becomes an AgentCommand row that the node's agent runs and answers.

Needs Django (the command queue is a table), so the registry imports it on first use only.
Returns exactly what the node printed; a node that does not answer in time yields exit 124.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from hardware.enrollment import node_token_revoked
from hardware.selectors import agent_token_issued
from hardware.services import agent_command_enqueue, agent_command_wait, agent_prepare_reached

from ..card_share import card_share
from .base import Driver, DriverOutput, NodeRef, container_name, readiness_command
from .registry import register_driver

EXIT_NO_AGENT = 69  # EX_UNAVAILABLE: no agent token issued for this node
EXIT_TIMEOUT = 124  # like `timeout`: the agent never answered


@register_driver("agent")
class AgentDriver(Driver):
    """Talks to the node agent through the database (the agent polls /api/v1/agent/commands/)."""

    def __init__(self, *, timeout_s: float | None = None, poll_s: float | None = None) -> None:
        from django.conf import settings

        self.timeout_s = float(timeout_s if timeout_s is not None else settings.AGENT_COMMAND_TIMEOUT_SECONDS)
        self.poll_s = float(poll_s if poll_s is not None else settings.AGENT_COMMAND_POLL_SECONDS)

    def run(self, node: NodeRef, kind: str, payload: dict[str, Any], *, timeout_s: float | None = None,
            meta: dict[str, Any] | None = None) -> DriverOutput:
        """Queue `kind` for the node's agent and wait for what it printed."""
        started = time.monotonic()
        meta = dict(meta or {})
        if not agent_token_issued(node_id=node.id):
            return DriverOutput(f"{node.hostname}: no agent token issued for this node; issue one in the admin\n",
                                EXIT_NO_AGENT, 0.0, meta)
        if node_token_revoked(node_id=node.id):
            # Revoked at a bare-metal release: no agent can answer until the node's fresh OS enrolls (the
            # Redfish driver's deploy boot), or an operator reimages it and issues a new token.
            return DriverOutput(f"{node.hostname}: the node's agent token was revoked when its bare-metal lease "
                                "ended; reimage the node (Redfish deploy boot) or issue a new token in the "
                                "admin\n", EXIT_NO_AGENT, 0.0, meta)
        timeout = self.timeout_s if timeout_s is None else timeout_s
        cmd = agent_command_enqueue(node_id=node.id, kind=kind, payload=payload, timeout_s=timeout)
        cmd = agent_command_wait(command_id=cmd.pk, poll_s=self.poll_s)
        meta.update({"command_id": str(cmd.pk)})
        if cmd.state != "done":
            return DriverOutput(f"{node.hostname}: the agent did not answer {kind} within {timeout:g} s "
                                f"(command {cmd.pk})\n", EXIT_TIMEOUT, time.monotonic() - started, meta)
        meta.update(cmd.meta or {})
        return DriverOutput(cmd.output, cmd.exit_code, cmd.duration_s or time.monotonic() - started, meta)

    def prepare(self, node: NodeRef, cards: Sequence[int], *, kind: str, image: str, ssh_keys: Sequence[str],
                env: Mapping[str, str], instance_id: str, ssh_port: int | None = None,
                cluster: Mapping[str, Any] | None = None, storage: Mapping[str, Any] | None = None,
                registry_auth: Mapping[str, Any] | None = None) -> DriverOutput:
        """Create the instance's container on `cards` (or set up the bare-metal host), its volumes mounted."""
        payload = {"kind": kind, "cards": list(cards), "image": image, "ssh_keys": list(ssh_keys),
                   "env": dict(env), "instance_id": instance_id, "vendor": node.vendor,
                   "collective": node.collective}
        if cluster:  # its part of a multi-part instance: the network to join, its address, the hostfile
            payload["cluster"] = dict(cluster)
        if storage:  # its volumes and datasets on the zone's storage root (agent/cardmix_agent/volumes.py)
            payload.update(storage_root=storage["storage_root"], volumes=list(storage["volumes"]))
        if registry_auth and kind == "container":  # sealed here; the agent API opens it for the node alone
            payload["registry_auth"] = dict(registry_auth)
        if kind == "container":
            payload.update(name=container_name(instance_id, cards), ssh_port=ssh_port)
            # Its CPU and memory in proportion to its cards (the agent enforces them; a node of unknown size: none).
            share = card_share(cards=len(cards), card_count=node.card_count, cpu_cores=node.cpu_cores,
                               memory_mib=node.memory_mib)
            if share.limits():
                payload["limits"] = share.limits()
        # meta's ssh_port is the agent's own answer: an agent that predates per-container ports omits it.
        return self.run(node, "prepare", payload, meta={"kind": kind, "image": image, "cards": list(cards)})

    def image_save(self, node: NodeRef, *, container: str, reference: str,
                   registry_auth: Mapping[str, Any] | None = None, timeout_s: float = 3600.0) -> DriverOutput:
        """The node's agent commits the container and pushes it (docker runtime); the login stays sealed in the row."""
        payload = {"container": container, "reference": reference, "timeout_s": timeout_s,
                   **({"registry_auth": dict(registry_auth)} if registry_auth else {})}
        return self.run(node, "image_save", payload, timeout_s=timeout_s + 60,
                        meta={"container": container, "reference": reference})

    def readiness(self, node: NodeRef, cards: Sequence[int]) -> DriverOutput:
        """all_reduce_perf / all_reduce_test over `cards` on the node."""
        command, tool = readiness_command(node.collective, len(cards))
        payload = {"cards": list(cards), "collective": node.collective, "command": command, "tool": tool}
        return self.run(node, "readiness", payload,
                        meta={"command": command, "tool": tool, "ranks": len(cards), "cards": list(cards)})

    def health_check(self, node: NodeRef, card: int) -> DriverOutput:
        """nvidia-smi -q ECC/row remapper or npu-smi health for one card."""
        command = (f"npu-smi info -t health -i {card}" if node.collective == "hccl"
                   else f"nvidia-smi -q -i {card} -d ECC,ROW_REMAPPER")
        return self.run(node, "health_check", {"card": card, "collective": node.collective},
                        meta={"command": command, "card": card})

    def inter_node(self, nodes: Sequence[NodeRef], cards_per_node: int, *,
                   cards: Sequence[Sequence[int]] | None = None) -> DriverOutput:
        """mpirun of the collective test across `nodes`, started by the first node's agent."""
        first = nodes[0]
        ranks = len(nodes) * cards_per_node
        tool = "hccl_test" if first.collective == "hccl" else "nccl-tests"
        payload = {"hosts": [n.ssh_host or n.hostname for n in nodes], "cards_per_node": cards_per_node,
                   "collective": first.collective, "tool": tool}
        if cards:  # each host's own cards (a container's), never the first N of a shared node
            payload["cards"] = [list(c) for c in cards]
        return self.run(first, "inter_node", payload,
                        meta={"tool": tool, "ranks": ranks, "nodes": [n.hostname for n in nodes]})

    def reachability(self, nodes: Sequence[NodeRef], cluster: Mapping[str, Any], *,
                     timeout_s: float = 60.0) -> DriverOutput:
        """Every node's agent at once: its parts listen on their probe ports and connect to all the others'.

        Queued on all nodes before waiting on any, so the probes overlap; each agent retries its connections for
        `timeout_s` while the others come up. The text is each node's answer under its hostname.
        """
        started = time.monotonic()
        parts = list(cluster["parts"])
        missing = [n.hostname for n in nodes if not agent_token_issued(node_id=n.id)]
        if missing:
            return DriverOutput(f"{', '.join(missing)}: no agent token issued for this node; issue one in the admin\n",
                                EXIT_NO_AGENT, 0.0, {"tool": "tcp"})
        commands = []
        for node in nodes:
            local = [{"part": p["part"], "name": container_name(cluster["instance_id"], p["cards"])
                      if cluster.get("kind") == "container" else None}
                     for p in parts if p["node_id"] == node.id]
            payload = {"instance_id": cluster["instance_id"], "mode": cluster["mode"], "parts": parts,
                       "local": local, "timeout_s": timeout_s}
            commands.append((node, agent_command_enqueue(node_id=node.id, kind="reachability", payload=payload,
                                                         timeout_s=timeout_s + self.timeout_s)))
        text, code, ids = "", 0, []
        for node, cmd in commands:
            cmd = agent_command_wait(command_id=cmd.pk, poll_s=self.poll_s)
            ids.append(str(cmd.pk))
            if cmd.state != "done":
                text += f"== {node.hostname} ==\n{node.hostname}: the agent did not answer reachability (command {cmd.pk})\n"
                code = code or EXIT_TIMEOUT
                continue
            text += f"== {node.hostname} ==\n{cmd.output}"
            code = code or cmd.exit_code
        return DriverOutput(text, code, time.monotonic() - started,
                            {"tool": "tcp", "command_ids": ids,
                             "command": f"tcp probe across {len(parts)} parts ({cluster['mode']})"})

    def topology(self, node: NodeRef) -> DriverOutput:
        """nvidia-smi topo -m / npu-smi info -t topo as the node prints it."""
        command = "npu-smi info -t topo" if node.collective == "hccl" else "nvidia-smi topo -m"
        return self.run(node, "topology", {"collective": node.collective}, meta={"command": command})

    def release(self, node: NodeRef, cards: Sequence[int], *, instance_id: str) -> DriverOutput:
        """Remove the container on `cards`, or the bare-metal instance's keys (no cards); the container's disk
        goes with it (`docker rm`): nothing is kept.

        When no prepare (or, for a warm-pool node, no install_keys) of it ever reached the agent (still queued ones are withdrawn), nothing runs there:
        answer at once rather than wait for an agent that may be gone.
        """
        if not agent_prepare_reached(node_id=node.id, instance_id=instance_id, cards=list(cards) or None):
            return DriverOutput(f"{node.hostname}: no prepare of {instance_id} reached the agent; nothing to "
                                f"release\n", 0, 0.0, {"instance_id": instance_id, "skipped": True})
        payload = {"cards": list(cards), "instance_id": instance_id}
        if cards:
            payload["name"] = container_name(instance_id, cards)
        return self.run(node, "release", payload, meta={"instance_id": instance_id})

    def install_keys(self, node: NodeRef, *, instance_id: str, ssh_keys: Sequence[str]) -> DriverOutput:
        """The agent writes root's authorized_keys atomically (agents from 1.7.0; the operator's own file is kept
        and comes back at the release, as after a bare-metal prepare)."""
        return self.run(node, "install_keys", {"instance_id": instance_id, "ssh_keys": list(ssh_keys)},
                        meta={"instance_id": instance_id, "ssh_keys": len(ssh_keys)})

    def wipe(self, node: NodeRef) -> DriverOutput:
        """Wipe the node's local scratch disks and reset its accelerators."""
        return self.run(node, "wipe", {"collective": node.collective}, meta={"command": "wipe"})
