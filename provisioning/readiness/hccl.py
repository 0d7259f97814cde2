"""Parser for Huawei hccl_test (all_reduce_test & co.) stdout."""

from __future__ import annotations

import math
import re

from .bandwidth import allreduce_busbw
from .result import HCCL_TEST, ReadinessResult

_HEADER = re.compile(r"data_size\s*\(Bytes\)\s*:", re.IGNORECASE)
# hccl_test prints no fixed error format; CANN log lines carry "[ERROR]", "EI0002"-style
# codes, "... failed", "timeout". Table rows (with "failed" in them) are handled apart.
_ERROR_LINE = re.compile(r"error|fail|time(?:d)? ?out|\bE[EIJLZ]\d{4}\b", re.IGNORECASE)
_CHECK_VALUES = {"success": "success", "failed": "failed", "null": "NULL"}
# Column names as printed; the binary spells "aveg_time(us):", the docs "avg_time(us):".
_COLUMN_KEYS = {
    "data_size": "size",
    "avg_time": "time",
    "aveg_time": "time",
    "alg_bandwidth": "alg",
    "check_result": "check",
}


def _columns(line: str) -> dict[str, int] | None:
    """Header line → {logical column: index}, or None if a column is missing."""
    found: dict[str, int] = {}
    for index, cell in enumerate(line.split("|")):
        name = cell.strip().split("(", 1)[0].rstrip(":").strip().lower()
        if name in _COLUMN_KEYS:
            found[_COLUMN_KEYS[name]] = index
    return found if len(found) == 4 else None


def parse_hccl_test(text: str, ranks: int) -> ReadinessResult:
    """Parse hccl_test stdout; bus bandwidth = alg × 2(n−1)/n with n = ranks. Never raises."""
    result = ReadinessResult(tool=HCCL_TEST, ranks=ranks, collective="all_reduce")
    try:
        _parse_into(result, text if isinstance(text, str) else str(text), ranks)
    except Exception as exc:  # noqa: BLE001 - last-resort guard, see parse_nccl_tests
        result.parse_errors.append(f"internal parser error: {exc!r}")
    return result


def _parse_into(result: ReadinessResult, text: str, ranks: int) -> None:
    if not isinstance(ranks, int) or ranks < 1:
        result.parse_errors.append(f"ranks must be a positive integer, got {ranks!r}")
        return
    columns: dict[str, int] | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if _HEADER.search(line):
            columns = _columns(line)
            if columns is None:
                result.parse_errors.append(f"line {lineno}: unrecognised hccl_test header {line[:200]!r}")
            continue
        if columns is not None and "|" in line:
            error = _parse_row(result, line, columns, ranks)
            if error:
                result.parse_errors.append(f"line {lineno}: malformed data row ({error}): {line[:200]!r}")
            continue
        if _ERROR_LINE.search(line):
            result.error_lines.append(line[:500])
    _summarise(result)


def _parse_row(result: ReadinessResult, line: str, columns: dict[str, int], ranks: int) -> str | None:
    """Append one table row to result; return an error description instead if it is malformed."""
    cells = [c.strip() for c in line.split("|")]
    if len(cells) != max(columns.values()) + 1:
        return f"expected {max(columns.values()) + 1} fields, got {len(cells)}"
    size, time_s, alg_s, check_s = (cells[columns[k]] for k in ("size", "time", "alg", "check"))
    if not size.isdigit():
        return "size not an integer"
    try:
        time_us, algbw = float(time_s), float(alg_s)
    except ValueError:
        return "time/bandwidth not numbers"
    if not (math.isfinite(time_us) and math.isfinite(algbw)) or time_us < 0 or algbw < 0:
        return "time/bandwidth out of range"
    check = _CHECK_VALUES.get(check_s.lower())
    if check is None:
        return f"unknown check_result {check_s!r}"
    wrong = {"success": 0, "failed": 1, "NULL": None}[check]
    result.rows.append(
        {
            "size_bytes": int(size),
            "count": None,
            "type": None,
            "redop": None,
            "root": None,
            # hccl_test has no in-place pass; its one measurement is stored as out-of-place.
            "out_of_place": {
                "time_us": time_us,
                "algbw_gbps": algbw,
                "busbw_gbps": round(allreduce_busbw(algbw, ranks), 4),
                "wrong": wrong,
            },
            "in_place": None,
            "check": check,
        }
    )
    result.data_errors += wrong or 0
    return None


def _summarise(result: ReadinessResult) -> None:
    if not result.rows:
        result.parse_errors.append("no data rows (garbage, empty or truncated before the table)")
        return
    largest = max(r["size_bytes"] for r in result.rows)
    result.largest_size_bytes = largest
    result.busbw_peak_gbps = max(r["out_of_place"]["busbw_gbps"] for r in result.rows)
    result.busbw_largest_gbps = min(
        r["out_of_place"]["busbw_gbps"] for r in result.rows if r["size_bytes"] == largest
    )
    if all(r["check"] == "NULL" for r in result.rows):
        result.warnings.append("check_result NULL on every row: data were not verified")
