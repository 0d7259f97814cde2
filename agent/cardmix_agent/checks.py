"""Readiness, inter-node, health and topology checks, and the wipe between tenants."""
from __future__ import annotations

import errno
import os
import shlex
from pathlib import Path

from .host import parse_npu_info
from .programs import run


def disk_in_use(disk: str, mounts: str) -> str | None:
    """Why `blkdiscard -f` (which skips its own exclusive open) must not touch `disk`, else None.

    Mounted under any of its names (a /dev/disk/by-id link, /dev/mapper/…: /proc/mounts says /dev/nvme1n1p1),
    or held open exclusively by the kernel (LVM, md, swap, a filesystem /proc/mounts names as /dev/root).
    """
    real = os.path.realpath(disk)
    for line in mounts.splitlines():
        source = line.split()[0] if line.strip() else ""
        if source.startswith(disk) or (source.startswith("/") and os.path.realpath(source).startswith(real)):
            return "it is mounted"
    try:
        os.close(os.open(real, os.O_RDONLY | os.O_EXCL))
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            return "it is in use (mounted, or held by LVM, md or swap)"
    return None



class Checks:
    """The commands that test or clean the node."""

    def tool_path(self, name: str) -> str:
        """The readiness binary: --readiness-bin is the program itself or a directory holding it."""
        configured = self.args.readiness_bin
        if configured and os.path.isdir(configured):
            return os.path.join(configured, name)
        return configured or name

    def do_readiness(self, payload: dict):
        argv = shlex.split(payload["command"])
        argv[0] = self.tool_path(argv[0])
        devices = ",".join(str(c) for c in payload.get("cards", []))
        if payload.get("collective") == "hccl":
            env = {"ASCEND_RT_VISIBLE_DEVICES": devices}
        else:  # the cards are nvidia-smi's indices (PCI order); CUDA's own default order is fastest first
            env = {"CUDA_VISIBLE_DEVICES": devices, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        text, code = run(argv, timeout=self.args.readiness_timeout, env=env)
        return text, code, {"argv": argv}

    def do_inter_node(self, payload: dict):
        per_node, hosts = int(payload["cards_per_node"]), payload["hosts"]
        ranks = per_node * len(hosts)
        host_list = ",".join(f"{h}:{per_node}" for h in hosts)
        hccl = payload.get("collective") == "hccl"
        if payload.get("cards"):  # each host runs its own cards (a container's, not its neighbours'): MPMD
            argv = [self.args.mpirun]
            for host, cards in zip(hosts, payload["cards"]):  # noqa: B905 (python 3.9)
                devices, n = ",".join(str(int(c)) for c in cards), str(len(cards))
                argv += [":"] if len(argv) > 1 else []
                if hccl:
                    argv += ["-n", n, "-host", host, "env", f"ASCEND_RT_VISIBLE_DEVICES={devices}",
                             self.tool_path("all_reduce_test"), "-b", "8G", "-e", "8G", "-p", n]
                else:
                    argv += ["-np", n, "-H", f"{host}:{n}", "env", f"CUDA_VISIBLE_DEVICES={devices}",
                             "CUDA_DEVICE_ORDER=PCI_BUS_ID", self.tool_path("all_reduce_perf"), "-b", "8G", "-e", "8G",
                             "-f", "2", "-g", "1", "-c", "1"]
        elif hccl:
            argv = [self.args.mpirun, "-n", str(ranks), "-hosts", host_list, self.tool_path("all_reduce_test"),
                    "-b", "8G", "-e", "8G", "-p", str(per_node)]
        else:
            argv = [self.args.mpirun, "-np", str(ranks), "-H", host_list, self.tool_path("all_reduce_perf"),
                    "-b", "8G", "-e", "8G", "-f", "2", "-g", "1", "-c", "1"]
        text, code = run(argv, timeout=self.args.readiness_timeout)
        return text, code, {"argv": argv}

    def do_health_check(self, payload: dict):
        card = str(int(payload["card"]))
        if payload.get("collective") == "hccl":
            argv = [self.args.npu_smi, "info", "-t", "health", "-i", card]
        else:
            argv = [self.args.nvidia_smi, "-q", "-i", card, "-d", "ECC,ROW_REMAPPER"]
        text, code = run(argv, timeout=60)
        return text, code, {"argv": argv}

    def do_topology(self, payload: dict):
        argv = ([self.args.npu_smi, "info", "-t", "topo"] if payload.get("collective") == "hccl"
                else [self.args.nvidia_smi, "topo", "-m"])
        text, code = run(argv, timeout=60)
        return text, code, {"argv": argv}

    def do_wipe(self, payload: dict):
        """Remove every instance, discard the configured scratch disks, reset the accelerators."""
        instances = sorted((self.state_dir / "instances").iterdir())
        lines, worst = self.wipe_keys(instances)
        # Volume links of bare-metal tenants go; the storage root itself is never wiped (volumes outlive tenants).
        lines += [self.bare_metal_unlink(where).strip() for where in instances]
        removed, code = self.runtime.wipe_instances(instances)  # their containers or processes, then their state
        lines += removed
        worst = worst or code
        mounted = Path("/proc/mounts").read_text() if Path("/proc/mounts").exists() else ""
        for disk in self.args.wipe_disk:
            busy = disk_in_use(disk, mounted)
            if busy:
                lines.append(f"refusing to wipe {disk}: {busy}")
                worst = worst or 1
                continue
            text, code = run(["blkdiscard", "-f", disk], timeout=3600)
            lines.append(f"blkdiscard {disk}: {'ok' if code == 0 else text.strip()}")
            worst = worst or code
        if not self.args.wipe_disk:
            lines.append("no scratch disks configured (--wipe-disk); nothing to discard")
        if payload.get("collective") == "hccl":
            for device in parse_npu_info(run([self.args.npu_smi, "info"], timeout=60)[0]):
                text, code = run([self.args.npu_smi, "set", "-t", "reset", "-i", str(device["index"]), "-c", "0"],
                                 timeout=300)
                lines.append(text.strip())
                worst = worst or code
        else:
            text, code = run([self.args.nvidia_smi, "-r"], timeout=300)
            lines.append(text.strip())
            worst = worst or code
        return "\n".join(ln for ln in lines if ln) + "\n", worst, {}
