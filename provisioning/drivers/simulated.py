"""Simulated driver: a fleet that takes realistic time, prints real tool formats and fails sometimes."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from . import sim_output as out
from .base import Driver, DriverOutput, NodeRef, key_fingerprint, readiness_command
from .registry import register_driver
from .sim_bandwidth import LOW_BANDWIDTH_FACTOR, inter_node_busbw, model_for
from .sim_profiles import PROFILES, SimProfile

FAULTS = frozenset({"boot_failure", "low_bandwidth", "data_errors", "nccl_error", "timeout", "truncated"})
# nvidia-smi topo -m link labels: H100 SXM has 18 NVLink 4 links; H800 / A800 are the
# export variants with 8 links (400 GB/s), which nvidia-smi shows as NV8.
TOPOLOGY_LINK = {"h100-sxm-80g": "NV18", "h800-sxm-80g": "NV8", "a800-sxm-80g": "NV8"}
EXIT_NCCL_ERROR = 3  # nccl-tests testNcclError
EXIT_TIMEOUT = 124  # the agent's `timeout` wrapper killed the test


@register_driver("simulated")
class SimulatedDriver(Driver):
    """The default driver: deterministic for a seed, sleeps profile delays × delay_scale."""

    def __init__(
        self,
        *,
        profile: str | SimProfile = "dev",
        delay_scale: float = 1.0,
        seed: int | None = None,
        failure_rate_scale: float = 1.0,
        forced_faults: Mapping[str, Iterable[str]] | None = None,
        nics_per_node: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.profile = PROFILES[profile] if isinstance(profile, str) else profile
        self.delay_scale = float(delay_scale)
        self.failure_rate_scale = float(failure_rate_scale)
        self.nics_per_node = nics_per_node
        self._rng = random.Random(seed)
        self._sleep = sleep
        # One driver may serve several Celery threads; the RNG and fault table are shared.
        self._lock = threading.Lock()
        self._forced: dict[str, list[str]] = {}
        for key, faults in (forced_faults or {}).items():
            self.force(key, *faults)

    # -- fault control ---------------------------------------------------------------

    def force(self, node_key: str, *faults: str) -> None:
        """Force faults on every later call for a node id or hostname ("*" = every node)."""
        unknown = set(faults) - FAULTS
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {sorted(FAULTS)}")
        with self._lock:
            self._forced.setdefault(str(node_key), []).extend(faults)

    def clear_faults(self, node_key: str | None = None) -> None:
        """Forget forced faults for one node key, or all of them."""
        with self._lock:
            if node_key is None:
                self._forced.clear()
            else:
                self._forced.pop(str(node_key), None)

    def _faults(
        self, nodes: Sequence[NodeRef], call_faults: Iterable[str], random_kinds: Sequence[str]
    ) -> set[str]:
        faults = set(call_faults)
        unknown = faults - FAULTS
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {sorted(FAULTS)}")
        with self._lock:
            for node in nodes:
                for key in (str(node.id), node.hostname, "*"):
                    faults.update(self._forced.get(key, ()))
            rates = {
                "boot_failure": self.profile.boot_failure_rate,
                "low_bandwidth": self.profile.low_bandwidth_rate,
                "data_errors": self.profile.data_errors_rate,
            }
            for kind in random_kinds:
                # Draw even when the rate is 0 so a seed gives the same sequence either way.
                if self._rng.random() < rates[kind] * self.failure_rate_scale:
                    faults.add(kind)
        return faults

    # -- time ------------------------------------------------------------------------

    def _draw(self, low: float, high: float) -> float:
        with self._lock:
            return self._rng.uniform(low, high)

    def _wait(self, *ranges: tuple[float, float]) -> tuple[float, float]:
        """Sleep the steps' drawn delays × delay_scale; return (slept, modeled) seconds."""
        modeled = sum(self._draw(*r) for r in ranges)
        slept = modeled * self.delay_scale
        if slept > 0:  # delay_scale=0: never call sleep at all (tests, benchmarks)
            self._sleep(slept)
        return slept, modeled

    # -- provisioning ------------------------------------------------------------------

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
        forced_faults: Iterable[str] = (),
        registry_auth: Mapping[str, Any] | None = None,
    ) -> DriverOutput:
        """Container start (20–60 s) or bare-metal power-on + PXE deploy + OS boot (6–12 min)."""
        faults = self._faults([node], forced_faults, ["boot_failure"])
        joined_storage = "".join(f"{v['kind']} {v['id']} mounted at {v['mount_path']}"
                                 f"{' (read-only)' if v.get('read_only') else ''}\n"
                                 for v in (storage or {}).get("volumes", []))
        meta: dict[str, Any] = {
            "kind": kind,
            "image": image,
            "instance_id": instance_id,
            "cards": list(cards),
            "ssh_keys": len(ssh_keys),
            "env_keys": sorted(env),
            "simulated_faults": sorted(faults),
            "ssh_port": ssh_port,
            **({"registry_login": "set"} if registry_auth else {}),
        }
        joined = _cluster_lines(node, cluster) + joined_storage
        if cluster:
            meta["cluster"] = {"part": cluster["part"], "address": cluster["address"],
                               "network": cluster["network"]["mode"], "hostfile": cluster["hostfile"],
                               "env": {k: env[k] for k in sorted(env) if k in cluster.get("env", {})}}
        if kind == "container":
            slept, modeled = self._wait(self.profile.container_start)
            cid = f"{int(self._draw(0, 2**48)):012x}"
            if "boot_failure" in faults:
                text = (
                    "docker: Error response from daemon: failed to create task for container: "
                    "OCI runtime create failed: nvidia-container-cli: initialization error: "
                    "nvml error: driver/library version mismatch: unknown.\n"
                )
                return DriverOutput(text, 125, slept, {**meta, "modeled_s": modeled})
            devices = ",".join(str(c) for c in cards)
            text = (
                f"{image}: image present in local cache\n"
                f"container {cid} started on {node.hostname} (devices {devices}, {len(ssh_keys)} ssh key(s))\n"
            )
            if ssh_port:
                text += f"sshd published on {node.ssh_host or node.hostname}:{ssh_port}\n"
            text += joined
            return DriverOutput(text, 0, slept, {**meta, "container_id": cid, "modeled_s": modeled})

        steps = [
            ("bmc", self.profile.bmc_power_on_post),
            ("pxe", self.profile.pxe_deploy),
            ("os", self.profile.os_boot),
        ]
        failing = None
        if "boot_failure" in faults:
            with self._lock:
                failing = self._rng.choice([name for name, _ in steps])
        lines, slept, modeled = [], 0.0, 0.0
        for name, delay in steps:
            s, m = self._wait(delay)
            slept, modeled = slept + s, modeled + m
            if name == failing:
                lines.append(
                    {
                        "bmc": f"[bmc] {node.hostname}: ComputerSystem.Reset On accepted; POST error: "
                        "memory training failed on DIMM B3",
                        "pxe": f"[pxe] {node.hostname}: PXE-E32: TFTP open timeout",
                        "os": f"[os] {node.hostname}: boot failed: kernel panic - not syncing: VFS: unable to mount root fs",
                    }[name]
                )
                return DriverOutput(
                    "\n".join(lines) + "\n", 1, slept, {**meta, "failed_step": name, "modeled_s": modeled}
                )
            lines.append(
                {
                    "bmc": f"[bmc] {node.hostname}: ComputerSystem.Reset On accepted; POST complete",
                    "pxe": f"[pxe] {node.hostname}: one-time PXE boot; image {image} written",
                    "os": f"[os] {node.hostname}: booted; sshd listening on {node.ssh_host or node.hostname}:{node.ssh_port}",
                }[name]
            )
        return DriverOutput("\n".join(lines) + "\n" + joined, 0, slept, {**meta, "modeled_s": modeled})

    def release(self, node: NodeRef, cards: Sequence[int], *, instance_id: str) -> DriverOutput:
        """Stop and remove the container (cards given, even all of them) or power the node off (no cards)."""
        if cards:
            slept, modeled = self._wait(self.profile.release_container)
            text = f"container for {instance_id} stopped and removed on {node.hostname}\n"
        else:
            slept, modeled = self._wait(self.profile.power_off)
            text = f"[bmc] {node.hostname}: ComputerSystem.Reset GracefulShutdown accepted; power Off\n"
        return DriverOutput(
            text, 0, slept, {"instance_id": instance_id, "cards": list(cards), "modeled_s": modeled}
        )

    def install_keys(self, node: NodeRef, *, instance_id: str, ssh_keys: Sequence[str],
                     forced_faults: Iterable[str] = ()) -> DriverOutput:
        """root's authorized_keys written on the running OS, as the agent reports it (each key's SHA256
        fingerprint, as ssh-keygen -l prints it); a forced `timeout` is an agent that never answers."""
        faults = self._faults([node], forced_faults, [])
        meta: dict[str, Any] = {"instance_id": instance_id, "ssh_keys": len(ssh_keys),
                                "fingerprints": [key_fingerprint(k) for k in ssh_keys],
                                "simulated_faults": sorted(faults)}
        if "timeout" in faults:
            return DriverOutput(f"{node.hostname}: the agent did not answer install_keys\n", EXIT_TIMEOUT, 0.0, meta)
        text = (f"[os] {node.hostname}: {len(ssh_keys)} ssh key(s) of {instance_id} in /root/.ssh/authorized_keys\n"
                + "".join(f"  {fp}\n" for fp in meta["fingerprints"]))
        return DriverOutput(text, 0, 0.0, meta)

    def wipe(self, node: NodeRef) -> DriverOutput:
        """Discard every NVMe namespace of the node."""
        slept, modeled = self._wait(self.profile.wipe)
        text = "".join(f"blkdiscard /dev/nvme{i}n1: ok\n" for i in range(4))
        return DriverOutput(text, 0, slept, {"command": "blkdiscard -f /dev/nvme*n1", "modeled_s": modeled})

    # -- checks --------------------------------------------------------------------------

    def readiness(
        self, node: NodeRef, cards: Sequence[int], *, forced_faults: Iterable[str] = ()
    ) -> DriverOutput:
        """all_reduce over `cards` at 8 GiB in nccl-tests / hccl_test format."""
        n = len(cards)
        command, tool = readiness_command(node.collective, n)
        faults = self._faults([node], forced_faults, ["low_bandwidth", "data_errors"])
        slept, modeled = self._wait(self.profile.readiness)
        busbw = self._busbw(node, n, faults)
        visible = "ASCEND_RT_VISIBLE_DEVICES" if node.collective == "hccl" else "CUDA_VISIBLE_DEVICES"
        text, code = self._render(
            tool, [(node.hostname, list(cards))], node.accelerator, busbw, n, faults, gpus_per_thread=n
        )
        meta = {
            "command": command,
            "tool": tool,
            "ranks": n,
            "cards": list(cards),
            "env": {visible: ",".join(str(c) for c in cards)},
            "modeled_s": modeled,
            "simulated_faults": sorted(faults),
        }
        return DriverOutput(text, code, slept, meta)

    def inter_node(
        self,
        nodes: Sequence[NodeRef],
        cards_per_node: int,
        *,
        cards: Sequence[Sequence[int]] | None = None,
        forced_faults: Iterable[str] = (),
    ) -> DriverOutput:
        """all_reduce across nodes, one rank per card; bandwidth bounded by the zone's fabric."""
        first = nodes[0]
        per_node = [list(c) for c in cards] if cards else [list(range(cards_per_node)) for _ in nodes]
        ranks = len(nodes) * cards_per_node
        hosts = ",".join(f"{n.hostname}:{cards_per_node}" for n in nodes)
        if first.collective == "hccl":
            command, tool = (
                f"mpirun -n {ranks} -hosts {hosts} all_reduce_test -b 8G -e 8G -p {cards_per_node}",
                "hccl_test",
            )
        else:
            command, tool = (
                f"mpirun -np {ranks} -H {hosts} all_reduce_perf -b 8G -e 8G -f 2 -g 1 -c 1",
                "nccl-tests",
            )
        faults = self._faults(nodes, forced_faults, ["low_bandwidth", "data_errors"])
        slept, modeled = self._wait(self.profile.inter_node)
        intra = self._busbw(first, cards_per_node, set())
        with self._lock:
            busbw = inter_node_busbw(self._rng, first.fabric, self.nics_per_node or cards_per_node, intra)
        if "low_bandwidth" in faults:
            busbw *= self._draw(*LOW_BANDWIDTH_FACTOR)
        text, code = self._render(
            tool,
            [(n.hostname, c) for n, c in zip(nodes, per_node, strict=True)],
            first.accelerator,
            busbw,
            ranks,
            faults,
            gpus_per_thread=1,
        )
        meta = {
            "command": command,
            "tool": tool,
            "ranks": ranks,
            "nodes": [n.hostname for n in nodes],
            "cards": per_node,
            "fabric": first.fabric,
            "modeled_s": modeled,
            "simulated_faults": sorted(faults),
        }
        return DriverOutput(text, code, slept, meta)

    def reachability(
        self,
        nodes: Sequence[NodeRef],
        cluster: Mapping[str, Any],
        *,
        timeout_s: float = 60.0,
        forced_faults: Iterable[str] = (),
    ) -> DriverOutput:
        """Each part connects to every other part's probe port: sub-millisecond on one fabric. `timeout` makes
        the last part unreachable (its node's end of the network is down), as the agent's probe reports it."""
        faults = self._faults(nodes, forced_faults, [])
        slept, modeled = self._wait(self.profile.topology)
        parts = cluster["parts"]
        down = parts[-1]["part"] if "timeout" in faults else None
        lines = []
        for src in parts:
            for dst in parts:
                if src is dst:
                    continue
                head = (f"reach part {src['part']} ({src['address']}) -> part {dst['part']} "
                        f"{dst['address']}:{dst['probe_port']}")
                if down in (src["part"], dst["part"]):
                    lines.append(f"{head} FAILED TimeoutError: timed out after {timeout_s:g} s")
                else:
                    lines.append(f"{head} ok {self._draw(0.04, 0.3):.2f} ms")
        meta = {"command": f"tcp probe across {len(parts)} parts ({cluster['mode']})", "tool": "tcp",
                "modeled_s": modeled, "simulated_faults": sorted(faults)}
        return DriverOutput("\n".join(lines) + "\n", 1 if down is not None else 0, slept, meta)

    def health_check(self, node: NodeRef, card: int, *, forced_faults: Iterable[str] = ()) -> DriverOutput:
        """One-card device health: ECC / row remapping (NVIDIA) or npu-smi health (Ascend)."""
        faults = self._faults([node], forced_faults, ["data_errors"])
        slept, modeled = self._wait(self.profile.health_check)
        bad = bool(faults & {"data_errors", "nccl_error"})
        if node.collective == "hccl":
            command = f"npu-smi info -t health -i {card}"
            text = out.ascend_health(card, "Alarm" if bad else "OK")
        else:
            command = f"nvidia-smi -q -i {card} -d ECC,ROW_REMAPPER"
            name = model_for(node.accelerator).device_name
            text = out.nvidia_health(
                card, name, uncorrectable=2 if "data_errors" in faults else 0, pending="nccl_error" in faults
            )
        code = 0
        if "timeout" in faults:
            text, code = "", EXIT_TIMEOUT
        elif "truncated" in faults:
            text = text[: len(text) // 3]
        meta = {"command": command, "card": card, "modeled_s": modeled, "simulated_faults": sorted(faults)}
        return DriverOutput(text, code, slept, meta)

    def topology(self, node: NodeRef) -> DriverOutput:
        """nvidia-smi topo -m (NVLink/NVSwitch) or npu-smi info -t topo (HCCS)."""
        slept, modeled = self._wait(self.profile.topology)
        if node.collective == "hccl":
            command, text = "npu-smi info -t topo", out.ascend_topology(node.card_count)
        else:
            link = TOPOLOGY_LINK.get(node.accelerator, "NV18")
            command, text = "nvidia-smi topo -m", out.nvidia_topology(node.card_count, node.card_count, link)
        return DriverOutput(text, 0, slept, {"command": command, "modeled_s": modeled})

    # -- rendering ----------------------------------------------------------------------------

    def _busbw(self, node: NodeRef, n: int, faults: set[str]) -> float:
        with self._lock:
            busbw = model_for(node.accelerator).draw(self._rng, n)
        if "low_bandwidth" in faults:
            busbw *= self._draw(*LOW_BANDWIDTH_FACTOR)
        return busbw

    def _render(
        self,
        tool: str,
        hosts: list[tuple[str, list[int]]],
        accelerator: str,
        busbw: float,
        ranks: int,
        faults: set[str],
        *,
        gpus_per_thread: int,
    ) -> tuple[str, int]:
        """Full tool output and exit code for one all_reduce run with the given faults."""
        host = hosts[0][0]
        with self._lock:
            rng = random.Random(self._rng.random())
        size = out.GIB8
        if tool == "hccl_test":
            lines = [
                f"the minbytes is {size}, maxbytes is {size}, iters is 20, warmup_iters is 5",
                out.hccl_header(),
            ]
            row = out.hccl_row(size, busbw, ranks, "failed" if "data_errors" in faults else "success")
            code = 0
            if "nccl_error" in faults:
                lines += [
                    f"[ERROR] HCCL({rng.randint(1000, 99999)},all_reduce_test):{host} "
                    "[transport_manager.cc:412] [TransportManager] link of rank 3 to rank 5 broken, HCCS lane down",
                    "hccl interface return err ./common/src/hccl_test_common.cc:538, retcode: 9",
                ]
                return "\n".join(lines) + "\n", 1
            if "timeout" in faults:
                lines += [
                    "[ERROR] HCCL: EI0002: The wait execution of the Notify register times out. "
                    "Reason: the remote rank did not respond within 1836 s"
                ]
                return "\n".join(lines) + "\n", EXIT_TIMEOUT
        else:
            device_name = model_for(accelerator).device_name
            lines = out.nccl_header(hosts, device_name, size, gpus_per_thread, rng)
            algbw = busbw / (2 * (ranks - 1) / ranks) if ranks > 1 else 0.0
            busbw = busbw if ranks > 1 else 0.0
            wrong = (rng.randint(1, 4096), rng.randint(1, 4096)) if "data_errors" in faults else (0, 0)
            row = out.nccl_row(size, algbw, busbw, wrong, rng)
            code = 0
            pid = rng.randint(1000, 99999)
            if "nccl_error" in faults:
                lines += [
                    f"{host}:{pid}:{pid + 7} [3] NCCL WARN Cuda failure 'uncorrectable NVLink error detected'",
                    f"{host}: Test NCCL failure common.cu:1005 'unhandled cuda error (run with "
                    "NCCL_DEBUG=INFO for details) / '",
                    f" .. {host} pid {pid}: Test failure common.cu:891",
                ]
                return "\n".join(lines) + "\n", EXIT_NCCL_ERROR
            if "timeout" in faults:
                lines += [f"{host}: Test timeout (1800s) common.cu:420 all_reduce did not complete"]
                return "\n".join(lines) + "\n", EXIT_TIMEOUT
        if "truncated" in faults:
            # Cut inside the data row: the log transport lost the rest, yet the process exited 0.
            return "\n".join(lines) + "\n" + row[: rng.randint(4, len(row) - 4)], 0
        lines.append(row)
        if tool != "hccl_test":
            lines += out.nccl_footer(sum(wrong), busbw)
        return "\n".join(lines) + "\n", code


def _cluster_lines(node: NodeRef, cluster: Mapping[str, Any] | None) -> str:
    """What an agent prints after joining its part to the instance's network and writing the hostfile."""
    if not cluster:
        return ""
    net = cluster["network"]
    if net["mode"] == "vxlan":
        where = (f"vxlan {net['vxlan']} (VNI {net['vni']}, peers {','.join(net['peers'])}) on bridge "
                 f"{net['bridge']} {net['subnet']}")
    else:
        where = f"host network{' on ' + net['device'] if net.get('device') else ''}"
    env = cluster.get("env", {})
    hosts = ", ".join(line for line in str(cluster.get("hostfile", "")).splitlines() if line)
    return (f"cluster part {cluster['part']} of {len(cluster['parts'])} on {node.hostname}: {where}, address "
            f"{cluster['address']}\nhostfile {cluster['hostfile_path']}: {len(cluster['parts'])} host(s), WORLD_SIZE "
            f"{env.get('WORLD_SIZE', '?')}, NODE_RANK {env.get('NODE_RANK', '?')}, MASTER_ADDR "
            f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}\nhostfile: {hosts}\n")
