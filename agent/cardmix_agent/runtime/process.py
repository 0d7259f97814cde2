"""The process runtime: a local process stands in for each container (tests and demos)."""
from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..cluster import cluster_of, cluster_run_args, rdma_run_args
from ..constants import log
from ..instances import ssh_port_of
from ..limits import CPU_PERIOD_US, cgroup2_root, cgroup_remove, limits_of
from ..programs import process_identity
from .base import Runtime


class ProcessRuntime(Runtime):
    name = "process"

    def bare_metal_keys(self, where: Path) -> Path:
        return where / "authorized_keys"

    def prepare(self, payload: dict, where: Path, *, keys: list[str], rdma: list[str], joined: str,
                part_meta: dict, mounts: list[dict] = ()) -> tuple[str, int, dict]:
        instance_id = payload["instance_id"]
        cards = ",".join(str(c) for c in payload.get("cards", []))
        cluster = cluster_of(payload)
        port = ssh_port_of(payload)
        env = {**os.environ, **{str(k): str(v) for k, v in (payload.get("env") or {}).items()},
               "CARDMIX_IMAGE": payload.get("image", ""), "CARDMIX_SSH_PORT": str(port or ""),
               **self.agent.fabric_env(payload, rdma)}
        if cluster:  # nothing to join here: record what the docker runtime would set up; the hostfile is the mount's
            env["CARDMIX_HOSTFILE"] = str(where / "hostfile")
            (where / "network.json").write_text(json.dumps(
                {"mode": cluster["network"]["mode"], "commands": self.agent.cluster_network_argv(cluster, instance_id),
                 "run_args": cluster_run_args(cluster, port, where / "hostfile") + rdma_run_args(rdma)}, indent=1))
        if mounts:
            env["CARDMIX_MOUNTS"] = json.dumps(self.process_mounts(where, mounts), sort_keys=True)
        argv = shlex.split(self.args.process_command) if self.args.process_command else [
            sys.executable, "-c", "import time\nwhile True: time.sleep(3600)"]
        replaced = self.stop_process(where) if (where / "pid").exists() else ""  # a retried prepare
        if port:
            replaced += self.free_process_port(port, where)
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True, cwd=where)
        (where / "pid.start").write_text(process_identity(proc.pid) or "")  # before the pid: it vouches for it
        (where / "pid").write_text(str(proc.pid))
        if port:
            (where / "port").write_text(str(port))
        limited, limits = self.process_limits(proc.pid, where, payload)
        return (f"{replaced}{payload.get('image')}: process runtime\nprocess {proc.pid} started for {instance_id} "
                f"(devices {cards}, {len(keys)} ssh key(s), ssh port {port or '-'})\n{joined}{limited}", 0,
                {"pid": proc.pid, "ssh_port": port, **part_meta, **({"limits": limits} if limits else {})})

    @staticmethod
    def process_mounts(where: Path, mounts: list[dict]) -> dict:
        """No mount namespace here: each volume is a symlink at its mount path under the instance's `mounts/` (the
        process's stand-in root), and CARDMIX_MOUNTS maps each mount path to its directory on the storage root.
        Read-only is not enforced (no bind mount); the docker runtime's --mount is."""
        top = where / "mounts"
        shutil.rmtree(top, ignore_errors=True)  # a retried prepare's links (never followed: rmtree unlinks them)
        for mount in mounts:
            link = top / mount["mount_path"].lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(mount["source"], target_is_directory=True)
        return {m["mount_path"]: m["source"] for m in mounts}

    def bare_metal_hostfile(self, cluster: dict, written: Path) -> Path:
        return written  # in the instance's state dir

    def drop_bare_metal_hostfile(self) -> None:
        pass  # it goes with the state dir

    def probe_argv(self, payload: dict, local: dict, part: int, argv: list[str]):
        return argv, None  # the host's own network

    def release(self, payload: dict, where: Path, legacy_name: str | None, legacy_dirs: list[Path]) -> tuple[str, int]:
        text, code = self.stop_process(where), 0
        text += cgroup_remove(where)
        for old in legacy_dirs:
            if (old / "pid").exists():
                text += self.stop_process(old)
        return text, code

    def wipe_instances(self, instances: list[Path]) -> tuple[list[str], int]:
        lines = []
        for where in instances:
            lines.append(self.stop_process(where).strip())
            shutil.rmtree(where, ignore_errors=True)
        return lines, 0

    def process_limits(self, pid: int, where: Path, payload: dict) -> tuple[str, dict]:
        """The process runtime's --cpus / --memory: a cgroup v2 of its own (cpu.max, memory.max) where the host
        has writable cgroup v2 cpu and memory controllers; else RLIMIT_AS for memory, and CPU is not limited
        (RLIMIT_CPU caps CPU seconds, not a share). RLIMIT_AS is a poor stand-in: CUDA reserves far more address
        space than it uses, so real GPU hosts need cgroup v2 (or the docker runtime). Applied right after the
        start, so what the process did in its first instant is not counted."""
        millicpus, memory_mib = limits_of(payload)
        if not (millicpus or memory_mib):
            return "", {}
        root = cgroup2_root(getattr(self.args, "cgroup_root", "auto"))
        if root is not None:
            group = root / "cardmix" / where.name
            try:
                for parent in (root, root / "cardmix"):
                    parent.mkdir(exist_ok=True)
                    (parent / "cgroup.subtree_control").write_text("+cpu +memory")
                group.mkdir(exist_ok=True)
                if millicpus:
                    (group / "cpu.max").write_text(f"{millicpus * CPU_PERIOD_US // 1000} {CPU_PERIOD_US}")
                if memory_mib:
                    (group / "memory.max").write_text(str(memory_mib * 1024 * 1024))
                (group / "cgroup.procs").write_text(str(pid))
                (where / "cgroup").write_text(str(group))
                return (f"limits: cgroup {group}: cpu.max {millicpus or '-'} millicpus, memory.max "
                        f"{memory_mib or '-'} MiB\n", {"by": "cgroup", "cgroup": str(group), "millicpus": millicpus,
                                                     "memory_mib": memory_mib})
            except OSError as exc:
                log.warning("cgroup %s not usable (%s); falling back to rlimits", group, exc)
        said, limits = "", {"by": "rlimit", "millicpus": None, "memory_mib": None}
        if memory_mib:
            try:
                resource.prlimit(pid, resource.RLIMIT_AS, (memory_mib * 1024 * 1024,) * 2)
                said, limits["memory_mib"] = f"memory: RLIMIT_AS {memory_mib} MiB", memory_mib
            except OSError as exc:
                said = f"memory: not limited ({exc})"
        if millicpus:
            said += f"{'; ' if said else ''}cpu: not limited ({millicpus} millicpus asked; no writable cgroup v2)"
        return f"limits: no writable cgroup v2 cpu/memory controllers; {said}\n", limits

    def free_process_port(self, port: int, where: Path) -> str:
        """Stop every other instance's process given `port` (the process runtime's docker_free_port)."""
        lines = []
        for other in self.state_dir.glob("instances/*/port"):
            if other.parent == where or other.read_text().strip() != str(port):
                continue
            stopped = self.stop_process(other.parent).strip()
            shutil.rmtree(other.parent, ignore_errors=True)
            log.warning("stale %s still had port %s: %s", other.parent.name, port, stopped)
            lines.append(f"stale {other.parent.name} still had port {port}: {stopped}\n")
        return "".join(lines)

    def stop_process(self, where: Path) -> str:
        """Stop the process (group) a prepare started for `where`, if it still runs.

        Never another process given the same pid (after a reboot, or once ours ended): the pid counts only
        while its boot and start time are those recorded next to it (`pid.start`; for a pid file written before
        1.2.0, while the process still runs in the instance's directory, where the prepare started it). An
        empty or truncated pid file (a full disk) means nothing is known to run: said, not raised.
        """
        pid_file = where / "pid"
        if not pid_file.exists():
            return f"no process for {where.name}\n"
        try:
            pid = int(pid_file.read_text().strip())
            if pid <= 0:
                raise ValueError(f"pid {pid}")
        except (OSError, ValueError) as exc:
            return f"pid file of {where.name} unreadable ({type(exc).__name__}: {exc}): treated as no process\n"
        stranger = self.not_ours(pid, where)
        if stranger:
            return f"process {pid} is not the one started for {where.name} ({stranger}): left alone\n"
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return f"process {pid} already gone\n"
        for _ in range(50):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return f"process {pid} stopped\n"
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)
        return f"process {pid} killed\n"

    @staticmethod
    def not_ours(pid: int, where: Path) -> str | None:
        """Why the running process `pid` is not the one started for `where`, else None. A pid no process has
        is ours to signal: the kernel keeps it unused while our process group (its id) lives on."""
        now = process_identity(pid)
        if now is None:
            return None
        try:
            recorded = (where / "pid.start").read_text().strip()
        except OSError:
            recorded = ""
        if recorded:
            return None if recorded == now else "it started later, or in another boot"
        # None recorded (an agent before 1.2.0, a full disk): the prepare started its process in this directory.
        if os.path.realpath(f"/proc/{pid}/cwd") == os.path.realpath(where):
            return None
        return "it does not run in the instance's directory"
