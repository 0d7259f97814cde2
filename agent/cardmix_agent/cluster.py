"""One cluster per instance: the parts' network (VXLAN or the host's), RDMA, the hostfile, the reachability probe."""
from __future__ import annotations

import json
import socket
import sys
import threading
from pathlib import Path

from .constants import INSTANCE_LABEL, PORT_LABEL
from .probe import PROBE
from .programs import run

# -- one cluster per instance -------------------------------------------------------------------------
# The platform sends a part of a multi-node or hybrid instance its view (`cluster` in the prepare payload): the
# network its node joins or sets up, its address, and the hostfile every part gets. A Docker network cannot span
# hosts: `vxlan` is a per-instance VXLAN over the fabric NICs enslaved to a per-instance bridge network on each
# node; `host` is the host's own network (the fabric NICs).
CLUSTER_HOSTFILE = "/etc/cardmix/hostfile"  # inside every part: `<address> slots=<cards>` per part (MPI/DeepSpeed)


def cluster_of(payload: dict) -> dict | None:
    """This part's view of its instance's cluster; None for a one-part instance (or a platform that sends none)."""
    cluster = payload.get("cluster")
    return cluster if isinstance(cluster, dict) and cluster.get("network") else None


def resolve(host: str) -> str:
    """An IPv4 address for a VXLAN endpoint (the platform may name a node by hostname)."""
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host  # `ip` then says what is wrong with it


def vxlan_up_argv(net: dict, *, ip: str = "ip", bridge: str = "bridge") -> list[list[str]]:
    """The commands that join the instance's bridge on this node to its VXLAN: the interface (VNI, UDP port, this
    node's fabric address and NIC), MTU, enslaved to the bridge, up, and one flood entry per other node. Peers and
    local must be addresses (see resolve)."""
    vx = net["vxlan"]
    add = [ip, "link", "add", vx, "type", "vxlan", "id", str(net["vni"]), "dstport", str(net["port"])]
    if net.get("local"):
        add += ["local", net["local"]]
    if net.get("device"):
        add += ["dev", net["device"]]
    add.append("nolearning")  # the flood entries below are the whole segment: no learning from stray packets
    cmds = [add, [ip, "link", "set", vx, "mtu", str(net["mtu"])], [ip, "link", "set", vx, "master", net["bridge"]],
            [ip, "link", "set", vx, "up"]]
    cmds += [[bridge, "fdb", "append", "00:00:00:00:00:00", "dev", vx, "dst", peer] for peer in net.get("peers", [])]
    return cmds


def vxlan_down_argv(net: dict, *, ip: str = "ip") -> list[list[str]]:
    """Remove the instance's VXLAN interface on this node (its flood entries go with it)."""
    return [[ip, "link", "del", net["vxlan"]]]


def cluster_network_create_argv(net: dict, instance_id: str, *, docker: str = "docker") -> list[str]:
    """The instance's bridge network on this node: its /24, this node's own gateway address (one L2 segment across
    the nodes: each node's bridge needs its own), the bridge named for the VXLAN to join, the VXLAN's MTU."""
    return [docker, "network", "create", "--driver", "bridge", "--subnet", net["subnet"], "--gateway", net["gateway"],
            "--label", f"{INSTANCE_LABEL}={instance_id}", "-o", f"com.docker.network.bridge.name={net['bridge']}",
            "-o", f"com.docker.network.driver.mtu={net['mtu']}", net["name"]]


def cluster_run_args(cluster: dict | None, port: int | None, hostfile: Path | None) -> list[str]:
    """`docker run` network options of a part: its instance's network at its own address (sshd published), or
    the host's network (its sshd on the published port itself: CARDMIX_SSH_PORT), and the hostfile mounted."""
    if not cluster:
        return []
    net = cluster["network"]
    if net["mode"] == "vxlan":
        args = ["--network", net["name"], "--ip", cluster["address"]]
        if port:
            args += ["-p", f"{port}:22"]
    else:
        args = ["--network", "host"]
    if port:
        args += ["--label", f"{PORT_LABEL}={port}"]
    if hostfile is not None:
        args += ["-v", f"{hostfile}:{CLUSTER_HOSTFILE}:ro"]
    return args


def rdma_run_args(devices: list[str]) -> list[str]:
    """RDMA for NCCL/HCCL over InfiniBand/RoCE: the verbs devices and the right to pin memory (memlock is
    already unlimited for every container)."""
    if not devices:
        return []
    args = []
    for device in devices:
        args += ["--device", device]
    return args + ["--cap-add", "IPC_LOCK"]



class Cluster:
    """What a part of a multi-part instance needs on this node, whatever the runtime."""

    def rdma_devices(self) -> list[str]:
        """The host's RDMA devices (/dev/infiniband/uverbs*, rdma_cm), sorted; none on a host without an HCA."""
        try:  # an Agent built on hand-made args (tests) has no option: the default place
            return sorted(str(p) for p in Path(getattr(self.args, "rdma_dir", "/dev/infiniband")).iterdir()
                          if not p.is_dir())
        except OSError:
            return []

    def fabric_env(self, payload: dict, rdma: list[str]) -> dict:
        """What only the node knows: NCCL may use InfiniBand/RoCE verbs only where their devices are, so it is told
        to use sockets where there are none (not left to fail over at the first collective)."""
        if payload.get("collective") == "hccl" or payload.get("vendor") == "huawei":
            return {}
        return {"NCCL_IB_DISABLE": "0" if rdma else "1"}

    def rdma_said(self, rdma: list[str]) -> str:
        where = getattr(self.args, "rdma_dir", "/dev/infiniband")
        return (f"RDMA: {len(rdma)} device(s) under {where}, IPC_LOCK\n" if rdma
                else f"no RDMA device under {where}: NCCL_IB_DISABLE=1\n")

    def cluster_write(self, cluster: dict, where: Path) -> Path:
        """The hostfile every part gets, and this part's view (cluster.json: a release reads its network)."""
        hostfile = where / "hostfile"
        hostfile.write_text(str(cluster.get("hostfile", "")))
        (where / "cluster.json").write_text(json.dumps(cluster, indent=1, sort_keys=True))
        return hostfile

    def cluster_network_argv(self, cluster: dict, instance_id: str) -> list[list[str]]:
        """The commands that give this node the part's network (the docker runtime runs them; the process runtime
        records them in network.json): none on the host's network."""
        net = cluster["network"]
        if net["mode"] != "vxlan":
            return []
        resolved = {**net, "local": resolve(net["local"]) if net.get("local") else "",
                    "peers": [resolve(p) for p in net.get("peers", [])]}
        return [cluster_network_create_argv(resolved, instance_id, docker=self.args.docker),
                *vxlan_up_argv(resolved, ip=self.args.ip, bridge=self.args.bridge)]

    @staticmethod
    def cluster_said(cluster: dict) -> str:
        net, env = cluster["network"], cluster.get("env") or {}
        if net["mode"] == "vxlan":
            where = f"vxlan {net['vxlan']} (VNI {net['vni']}) on bridge network {net['name']} {net['subnet']}"
        else:
            where = "host network" + (f" on {net['device']}" if net.get("device") else "")
        return (f"cluster part {cluster['part']} of {len(cluster.get('parts') or [])}: {where}, address "
                f"{cluster['address']}; MASTER_ADDR {env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}, WORLD_SIZE "
                f"{env.get('WORLD_SIZE')}, NODE_RANK {env.get('NODE_RANK')}, hostfile {CLUSTER_HOSTFILE}\n")

    def do_reachability(self, payload: dict):
        """Each of this node's parts listens on its probe port and connects to every other part's (PROBE), all at
        once: the other nodes' agents run theirs at the same time. A part in a container on its VXLAN network
        probes from inside the container's network namespace."""
        parts = {int(p["part"]): p for p in payload.get("parts") or []}
        timeout = float(payload.get("timeout_s") or 60.0)
        results: dict[int, tuple[str, int]] = {}

        def probe(local: dict) -> None:
            me = parts[int(local["part"])]
            cfg = {"instance_id": str(payload["instance_id"]), "me": me, "timeout_s": timeout,
                   "others": [p for k, p in sorted(parts.items()) if k != me["part"]]}
            argv = [sys.executable, "-c", PROBE, json.dumps(cfg)]
            argv, failed = self.runtime.probe_argv(payload, local, me["part"], argv)  # docker: nsenter
            if failed:
                results[me["part"]] = failed
                return
            results[me["part"]] = run(argv, timeout=timeout + 10)

        threads = [threading.Thread(target=probe, args=(local,)) for local in payload.get("local") or []]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        text = "".join(results[k][0] for k in sorted(results))
        code = max((c for _, c in results.values()), default=2)
        return text or "no part of this cluster on this node\n", code, {"parts": sorted(results)}
