"""Parser for the one-card device health check (nvidia-smi -q ECC/row-remapper, npu-smi health)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# nvidia-smi -q -d ECC,ROW_REMAPPER: any uncorrectable ECC count, a pending remap or a
# remapping failure means the card must not be handed over.
_NV_UNCORRECTABLE = re.compile(r"Uncorrectable[\w \-]*:\s*(\d+)", re.IGNORECASE)
_NV_PENDING = re.compile(r"^\s*Pending\s*:\s*Yes", re.IGNORECASE | re.MULTILINE)
_NV_REMAP_FAILED = re.compile(r"Remapping Failure Occurred\s*:\s*Yes", re.IGNORECASE)
# npu-smi info -t health: "Health Status : OK" (else Warning / Alarm / Critical).
_NPU_HEALTH = re.compile(r"Health\s+Status\s*:\s*(\w+)", re.IGNORECASE)
_NV_MARKER = re.compile(r"NVSMI LOG|Product Name", re.IGNORECASE)
# Last fields of each report: if they are missing the output was cut off, so nothing is known.
_NV_COMPLETE = re.compile(r"Remapping Failure Occurred\s*:", re.IGNORECASE)
_NPU_COMPLETE = re.compile(r"Error Information\s*:", re.IGNORECASE)


@dataclass(frozen=True)
class HealthResult:
    """Verdict of a device health check with the issues that caused a failure."""

    healthy: bool
    issues: tuple[str, ...]

    def to_dict(self) -> dict:
        """Plain dict for storage."""
        return {"healthy": self.healthy, "issues": list(self.issues)}


def parse_device_health(text: str, exit_code: int) -> HealthResult:
    """Healthy when the tool exited 0, its output is recognised, and it reports no fault."""
    issues: list[str] = []
    text = text if isinstance(text, str) else str(text)
    if exit_code != 0:
        issues.append(f"exit_code: {exit_code}")
    npu = _NPU_HEALTH.findall(text)
    if npu:
        issues += [f"npu_health: {status}" for status in npu if status.upper() != "OK"]
        if not _NPU_COMPLETE.search(text):
            issues.append("incomplete: npu-smi report cut off")
    elif _NV_MARKER.search(text):
        if not (_NV_COMPLETE.search(text) and _NV_UNCORRECTABLE.search(text)):
            issues.append("incomplete: nvidia-smi report cut off")
        bad = sum(int(n) for n in _NV_UNCORRECTABLE.findall(text))
        if bad:
            issues.append(f"ecc_uncorrectable: {bad}")
        if _NV_PENDING.search(text):
            issues.append("row_remap_pending")
        if _NV_REMAP_FAILED.search(text):
            issues.append("row_remap_failure")
    else:
        issues.append("unrecognised: no health report in the output")
    return HealthResult(healthy=not issues, issues=tuple(issues))
