"""CPU and memory: a container's share of the host, in proportion to its cards (the platform computes it)."""
from __future__ import annotations

import errno
import os
import time
from pathlib import Path

CPU_PERIOD_US = 100_000  # cgroup v2 cpu.max period; the quota is the share of it


def limits_of(payload: dict) -> tuple[int | None, int | None]:
    """(millicpus, memory MiB) the platform gave this container; None for what it did not (an older platform,
    a node of unknown size)."""
    limits = payload.get("limits") or {}

    def positive(value):
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
    return positive(limits.get("millicpus")), positive(limits.get("memory_mib"))


def cpus_text(millicpus: int) -> str:
    """28000 → "28", 13500 → "13.5" (docker's --cpus)."""
    return f"{millicpus // 1000}.{millicpus % 1000:03d}".rstrip("0").rstrip(".")


def limits_argv(payload: dict) -> list[str]:
    """`docker run` options for the container's share: --cpus, and --memory with no swap beyond it (swap would
    let it take the neighbours' RAM back through the page cache)."""
    millicpus, memory_mib = limits_of(payload)
    argv = ["--cpus", cpus_text(millicpus)] if millicpus else []
    if memory_mib:
        argv += ["--memory", f"{memory_mib}m", "--memory-swap", f"{memory_mib}m"]
    return argv


def cgroup2_root(setting: str = "auto") -> Path | None:
    """Where the process runtime may make cgroups: `setting` (a path, "none"), or the cgroup v2 mount when it
    offers the cpu and memory controllers and is writable (as root on a cgroup v2 host)."""
    if setting == "none":
        return None
    root = Path(setting) if setting != "auto" else None
    if root is None:
        try:
            mounts = Path("/proc/self/mounts").read_text().splitlines()
        except OSError:
            return None
        root = next((Path(m.split()[1]) for m in mounts if len(m.split()) > 2 and m.split()[2] == "cgroup2"), None)
    try:
        controllers = set((root / "cgroup.controllers").read_text().split()) if root else set()
    except OSError:
        return None
    return root if {"cpu", "memory"} <= controllers and os.access(root, os.W_OK) else None


def cgroup_remove(where: Path) -> str:
    """Remove the cgroup a process-runtime prepare made (empty once its process stopped; a killed one may take a
    moment to leave)."""
    recorded = where / "cgroup"
    if not recorded.exists():
        return ""
    group = Path(recorded.read_text().strip())
    for _ in range(50):
        try:
            group.rmdir()
            return ""
        except FileNotFoundError:
            return ""
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return f"cgroup {group} not removed: {exc}\n"
            time.sleep(0.1)
    return f"cgroup {group} not removed: still busy\n"
