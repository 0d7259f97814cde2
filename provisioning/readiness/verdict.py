"""The readiness gate: turn a parsed result and an exit code into pass/fail."""

from __future__ import annotations

from .result import ReadinessResult, Verdict


def evaluate(result: ReadinessResult, floor_gbps: float, exit_code: int) -> Verdict:
    """Pass = busbw at the LARGEST size ≥ floor, no data/error lines, exit 0, ≥ 1 row (SPEC §3)."""
    reasons: list[str] = []
    if not result.rows:
        reasons.append("no_data: no data rows in the output")
    if result.parse_errors:
        reasons.append(f"parse_error: {result.parse_errors[0]}")
    if exit_code != 0:
        reasons.append(f"exit_code: {exit_code}")
    if result.error_lines:
        reasons.append(
            f"error_lines: {len(result.error_lines)} line(s), first: {result.error_lines[0][:200]}"
        )
    if result.data_errors > 0:
        reasons.append(f"data_errors: {result.data_errors} wrong result(s)")
    if result.out_of_bounds:
        reasons.append(f"out_of_bounds: {result.out_of_bounds} value(s)")
    # Gate on the largest size only: the footer average spans every size of a sweep,
    # and small sizes are latency-bound, so it would fail healthy nodes.
    busbw = result.busbw_largest_gbps
    if busbw is None:
        if result.rows:
            reasons.append("below_floor: no bus bandwidth at the largest size")
    elif busbw < floor_gbps:
        reasons.append(
            f"below_floor: {busbw:.2f} GB/s < {floor_gbps:g} GB/s at {result.largest_size_bytes} B"
        )
    return Verdict(passed=not reasons, reasons=tuple(reasons), busbw_gbps=busbw, floor_gbps=floor_gbps)
