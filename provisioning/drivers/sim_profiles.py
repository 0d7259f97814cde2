"""Timing and failure profiles of the simulated fleet (defaults, not facts; SPEC §3)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

Range = tuple[float, float]  # seconds, drawn uniformly


@dataclass(frozen=True)
class SimProfile:
    """Delay ranges per step (seconds) and per-run failure probabilities."""

    name: str
    container_start: Range  # cached image start
    bmc_power_on_post: Range  # Redfish power-on until POST done
    pxe_deploy: Range  # PXE boot + image write
    os_boot: Range
    readiness: Range  # one all_reduce group
    inter_node: Range
    health_check: Range  # assumption: one nvidia-smi / npu-smi query plus ssh
    topology: Range  # assumption
    release_container: Range  # assumption: docker stop + rm
    power_off: Range  # assumption: graceful shutdown via BMC
    wipe: Range  # assumption: blkdiscard of NVMe drives
    boot_failure_rate: float = 0.01
    low_bandwidth_rate: float = 0.02
    data_errors_rate: float = 0.005

    def scaled(self, factor: float, *, name: str) -> SimProfile:
        """The same profile with every delay range multiplied by factor (rates unchanged)."""
        changes = {
            f.name: (getattr(self, f.name)[0] * factor, getattr(self, f.name)[1] * factor)
            for f in fields(self)
            if isinstance(getattr(self, f.name), tuple)
        }
        return replace(self, name=name, **changes)

    def delay_fields(self) -> list[str]:
        """Names of the delay ranges (for tests and docs)."""
        return [f.name for f in fields(self) if isinstance(getattr(self, f.name), tuple)]


REALISTIC = SimProfile(
    name="realistic",
    container_start=(20.0, 60.0),
    bmc_power_on_post=(120.0, 240.0),
    pxe_deploy=(180.0, 360.0),
    os_boot=(60.0, 120.0),
    readiness=(60.0, 120.0),
    inter_node=(60.0, 120.0),
    health_check=(10.0, 30.0),
    topology=(1.0, 3.0),
    release_container=(5.0, 15.0),
    power_off=(30.0, 90.0),
    wipe=(60.0, 180.0),
)

# Same shape as realistic, every delay / 60, so a bare-metal deploy takes ~10 s in development.
DEV = REALISTIC.scaled(1 / 60, name="dev")

PROFILES: dict[str, SimProfile] = {p.name: p for p in (REALISTIC, DEV)}
