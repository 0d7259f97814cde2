"""Parsed readiness output and the verdict drawn from it (pure data, JSON-safe)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

NCCL_TESTS = "nccl-tests"
HCCL_TEST = "hccl_test"


@dataclass
class ReadinessResult:
    """What one nccl-tests / hccl_test run printed, as numbers; no judgement yet."""

    tool: str
    # Each row: size_bytes, count, type, redop, root, out_of_place, in_place, where the
    # two halves are {time_us, algbw_gbps, busbw_gbps, wrong} (in_place None for hccl).
    rows: list[dict[str, Any]] = field(default_factory=list)
    ranks: int | None = None
    collective: str | None = None
    largest_size_bytes: int | None = None
    # nccl: min(out-of-place, in-place) busbw at the largest size, so one slow half fails it.
    busbw_largest_gbps: float | None = None
    busbw_peak_gbps: float | None = None
    data_errors: int = 0
    error_lines: list[str] = field(default_factory=list)
    out_of_bounds: int | None = None
    avg_busbw_footer: float | None = None
    parse_errors: list[str] = field(default_factory=list)
    # Oddities that do not fail a run on their own (e.g. busbw ≠ algbw × 2(n−1)/n).
    warnings: list[str] = field(default_factory=list)

    @property
    def ok_format(self) -> bool:
        """True when the output had data rows and nothing malformed or missing."""
        return bool(self.rows) and not self.parse_errors

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for a JSONField; floats are finite by construction."""
        data = asdict(self)
        data["ok_format"] = self.ok_format
        return data


@dataclass(frozen=True)
class Verdict:
    """Pass/fail for one readiness run, with machine-readable reason codes."""

    passed: bool
    reasons: tuple[str, ...]
    busbw_gbps: float | None
    floor_gbps: float

    @property
    def codes(self) -> tuple[str, ...]:
        """The reason codes only (the part before the colon), for counting and tests."""
        return tuple(r.split(":", 1)[0] for r in self.reasons)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for storage next to the parsed result."""
        return {
            "passed": self.passed,
            "reasons": list(self.reasons),
            "busbw_gbps": self.busbw_gbps,
            "floor_gbps": self.floor_gbps,
        }
