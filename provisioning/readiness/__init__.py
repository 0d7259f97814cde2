"""Readiness-test parsing and gating (pure Python: no Django, no settings)."""

from __future__ import annotations

from .bandwidth import allreduce_algbw, allreduce_bus_factor, allreduce_busbw
from .hccl import parse_hccl_test
from .health import HealthResult, parse_device_health
from .nccl import parse_nccl_tests
from .reachability import ReachabilityResult, parse_reachability
from .result import HCCL_TEST, NCCL_TESTS, ReadinessResult, Verdict
from .verdict import evaluate


def parse_output(text: str, *, tool: str, ranks: int | None = None) -> ReadinessResult:
    """Dispatch on the tool name a driver reports in DriverOutput.meta["tool"]."""
    if tool == HCCL_TEST:
        return parse_hccl_test(text, ranks if ranks is not None else 0)
    if tool == NCCL_TESTS:
        return parse_nccl_tests(text, ranks=ranks)
    result = ReadinessResult(tool=str(tool), ranks=ranks)
    result.parse_errors.append(f"unknown readiness tool {tool!r}")
    return result


__all__ = [
    "HCCL_TEST",
    "NCCL_TESTS",
    "HealthResult",
    "ReachabilityResult",
    "ReadinessResult",
    "Verdict",
    "allreduce_algbw",
    "allreduce_bus_factor",
    "allreduce_busbw",
    "evaluate",
    "parse_device_health",
    "parse_hccl_test",
    "parse_nccl_tests",
    "parse_output",
    "parse_reachability",
]
