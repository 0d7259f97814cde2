"""The docker runtime's side of a cluster: the instance's bridge network and VXLAN on this node."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from ..cluster import vxlan_down_argv
from ..constants import INSTANCE_LABEL
from ..programs import run


class DockerClusterNetworks:
    """Mixed into DockerRuntime."""

    def cluster_network_up(self, cluster: dict, instance_id: str) -> tuple[str, int]:
        """Docker runtime: the instance's bridge network and VXLAN on this node. Idempotent (a second part on this
        node, or a retried prepare, finds them). A network of that name labelled for another instance outlived its
        release (its slot was given out again): it goes first, with what still runs on it."""
        net = cluster["network"]
        if net["mode"] != "vxlan":
            return "", 0
        said = ""
        owner, code = run([self.args.docker, "network", "inspect", "-f", "{{index .Labels \"" + INSTANCE_LABEL + "\"}}",
                           net["name"]], timeout=120)
        if code == 0 and owner.strip() != instance_id:
            text, code = self.cluster_network_remove(net, stale=True)
            if code != 0:
                return text, code
            said = f"removed stale cluster network {net['name']} of instance {owner.strip() or '?'}\n"
        for argv in self.agent.cluster_network_argv(cluster, instance_id):
            text, code = run(argv, timeout=120)
            if code != 0 and not re.search(r"already exists|File exists", text):
                return said + f"{shlex.join(argv)} failed (exit {code}): {text.strip()[-500:]}\n", code
        return said, 0

    def cluster_network_remove(self, net: dict, *, stale: bool = False) -> tuple[str, int]:
        """The VXLAN interface, then the bridge network (and, for one that outlived its instance, its containers)."""
        if stale:
            text, code = run([self.args.docker, "ps", "-aq", "--filter", f"network={net['name']}"], timeout=120)
            ids = text.split() if code == 0 else []
            if ids:
                run([self.args.docker, "rm", "-f", *ids], timeout=300)
        for argv in vxlan_down_argv(net, ip=self.args.ip):
            text, code = run(argv, timeout=120)
            if code != 0 and not re.search(r"Cannot find device|does not exist", text):
                return f"{shlex.join(argv)} failed (exit {code}): {text.strip()[-300:]}\n", code
        return self.docker_network_rm(net["name"])

    def cluster_release(self, where: Path, instance_id: str) -> tuple[str, int]:
        """Docker runtime, after a part's container is gone: the last part of its instance on this node takes the
        instance's network with it."""
        try:
            net = json.loads((where / "cluster.json").read_text())["network"]
        except (OSError, ValueError, KeyError):
            return "", 0
        if net.get("mode") != "vxlan":
            return "", 0
        text, code = run([self.args.docker, "ps", "-aq", "--filter", f"label={INSTANCE_LABEL}={instance_id}"],
                         timeout=120)
        if code != 0:
            return f"docker ps failed (exit {code}): {text.strip()[-300:]}\n", code
        if text.split():
            return f"cluster network {net['name']} kept: other parts of {instance_id} still run here\n", 0
        removed, code = self.cluster_network_remove(net)
        return (removed or f"cluster network {net['name']} and {net['vxlan']} removed\n"), code

    def vxlan_remove_all(self) -> tuple[str, int]:
        """Wipe: every cluster VXLAN interface left on the node (their bridge networks went with the prune)."""
        text, code = run([self.args.ip, "-o", "link", "show", "type", "vxlan"], timeout=60)
        if code != 0:
            return f"ip link show failed (exit {code}): {text.strip()[-300:]}\n", code
        names = re.findall(r"^\d+:\s+(cmxvx\d+)[@:]", text, flags=re.M)
        for name in names:
            out, code = run([self.args.ip, "link", "del", name], timeout=60)
            if code != 0:
                return f"ip link del {name} failed: {out.strip()[-300:]}\n", code
        return f"removed {len(names)} cluster vxlan interface(s)\n", 0
