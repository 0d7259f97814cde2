"""What the host looks like: its cards (nvidia-smi / npu-smi), CPUs and memory, the heartbeat's body."""
from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

from .constants import NVIDIA_QUERY, VERSION
from .programs import run


def _int(value: str):
    value = value.strip().split(" ")[0]
    try:
        return int(float(value))
    except ValueError:
        return None


def parse_nvidia_query(text: str) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=… --format=csv,noheader` as dicts."""
    devices = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 7 or not cells[0].isdigit():
            continue
        devices.append({"index": int(cells[0]), "name": cells[1], "uuid": cells[2],
                        "memory_total_mib": _int(cells[3]), "driver_version": cells[4],
                        "temperature_c": _int(cells[5]), "utilization_pct": _int(cells[6])})
    return devices


def parse_npu_info(text: str) -> list[dict]:
    """NPU rows of `npu-smi info` (`| 0     910B3     | OK  | …`) as dicts (best effort)."""
    devices = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not cells or not cells[0]:
            continue
        first = cells[0].split()
        if len(first) >= 2 and first[0].isdigit() and not first[1].isdigit():
            devices.append({"index": int(first[0]), "name": " ".join(first[1:]), "uuid": "",
                            "memory_total_mib": None, "driver_version": "", "temperature_c": None,
                            "utilization_pct": None})
    return devices


def host_size() -> dict:
    """{"cpus": logical CPUs, "memory_mib": RAM} of this host, reported for the platform to divide."""
    memory_mib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_mib = int(line.split()[1]) // 1024  # kB
                break
    except (OSError, ValueError, IndexError):
        pass
    return {"cpus": os.cpu_count(), "memory_mib": memory_mib}



class HostReport:
    """The heartbeat body (also `--report`)."""

    def detect_vendor(self) -> str:
        if self.vendor != "auto":
            return self.vendor
        if shutil.which(self.args.nvidia_smi) or os.path.exists(self.args.nvidia_smi):
            return "nvidia"
        if shutil.which(self.args.npu_smi) or os.path.exists(self.args.npu_smi):
            return "huawei"
        return "nvidia"

    def report(self) -> dict:
        vendor = self.detect_vendor()
        errors: list[str] = []
        if vendor == "huawei":
            text, code = run([self.args.npu_smi, "info"], timeout=30)
            probe = self.health_probe(vendor, text, code)
            devices = parse_npu_info(text) if code == 0 else []
            versions = {"npu_driver": next((ln.split(":")[-1].strip().strip("|").strip() for ln in text.splitlines()
                                            if "Version" in ln), "")}
        else:
            text, code = run([self.args.nvidia_smi, f"--query-gpu={NVIDIA_QUERY}", "--format=csv,noheader"],
                             timeout=30)
            devices = parse_nvidia_query(text) if code == 0 else []
            probe = self.health_probe(vendor)
            versions = {"nvidia": devices[0]["driver_version"] if devices else ""}
        if code != 0:
            errors.append(f"{vendor} smi exit {code}: {text.strip()[-500:]}")
        return {"agent_version": VERSION, "hostname": self.args.hostname or socket.gethostname(),
                "runtime": self.args.runtime, "vendor": vendor, "devices": devices, "driver_versions": versions,
                "health": "ok" if code == 0 else "degraded", "smi_output": text[-60000:],
                "containers": self.instances(), "rdma_devices": self.rdma_devices(), "errors": errors,
                "volumes": self.volumes_report(), "health_probe": probe,
                **host_size()}
