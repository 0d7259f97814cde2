"""Parser for nccl-tests (all_reduce_perf & co.) stdout, current and pre-2.13 layouts."""

from __future__ import annotations

import math
import re
from typing import Any

from .bandwidth import allreduce_busbw
from .result import NCCL_TESTS, ReadinessResult

# `mpirun --tag-output` prefixes every line with "[job,rank]<stdout>:".
_MPI_PREFIX = re.compile(r"^\s*\[\d+,\d+\]<std(?:out|err)>:")
# Error lines per SPEC §3: "Test NCCL failure", " .. host pid N: Test failure", "NCCL WARN",
# "Test timeout"; "Test CUDA failure" is the same family (common.cu CUDACHECK).
_ERROR_LINE = re.compile(r"Test (?:NCCL |CUDA )?failure|NCCL WARN|Test timeout")
_OUT_OF_BOUNDS = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)\s*(\w+)?", re.IGNORECASE)
_AVG_BUSBW = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(\S+)", re.IGNORECASE)
_NGPUS = re.compile(r"\bnGpus\s+(\d+)")
_NTHREADS = re.compile(r"\bnThreads?\s+(\d+)")
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\b")
_COLLECTIVE = re.compile(r"Collective test (?:starting|concluded):\s*(\w+)")
_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INT = re.compile(r"^-?\d+$")

# Row layouts: how many leading identity fields precede the two result halves.
_LAYOUT_NEW = ("size", "count", "type", "redop", "root")  # 2.13+: "#wrong" per half
_LAYOUT_OLD = ("size", "count", "type", "redop")  # older: "error" per half, no root
_LAYOUT_OLDEST = ("size", "count", "type")  # very old builds: no redop either


class _RowError(ValueError):
    """A data-looking line that does not fit the table layout."""


def _finite(token: str) -> float:
    value = float(token)
    if not math.isfinite(value) or value < 0:
        raise _RowError(f"bad number {token!r}")
    return value


def _half(tokens: list[str], new_layout: bool) -> tuple[dict[str, Any], int, float | None]:
    """One out-of-place or in-place half: (fields, wrong-count contribution, error value)."""
    try:
        time_us, algbw, busbw = (_finite(t) for t in tokens[:3])
    except ValueError as exc:
        raise _RowError(str(exc)) from None
    last = tokens[3]
    if new_layout:
        if last == "N/A":
            wrong = None
        elif last.isdigit():
            wrong = int(last)
        else:
            raise _RowError(f"bad #wrong {last!r}")
        half = {"time_us": time_us, "algbw_gbps": algbw, "busbw_gbps": busbw, "wrong": wrong}
        return half, wrong or 0, None
    # Old layout prints the max relative error; a trailing '*' marks one over the threshold.
    flagged = last.endswith("*")
    try:
        error = _finite(last.rstrip("*"))
    except ValueError:
        raise _RowError(f"bad error value {last!r}") from None
    half = {"time_us": time_us, "algbw_gbps": algbw, "busbw_gbps": busbw, "wrong": None, "error": error}
    return half, int(flagged), error


def _parse_row(tokens: list[str], layout: tuple[str, ...]) -> tuple[dict[str, Any], int]:
    """A data row → (row dict, number of wrong elements it reports)."""
    n_ident = len(layout)
    if len(tokens) != n_ident + 8:
        raise _RowError(f"expected {n_ident + 8} fields, got {len(tokens)}")
    if not (tokens[0].isdigit() and tokens[1].isdigit()):
        raise _RowError("size/count not integers")
    if not _WORD.match(tokens[2]) or (n_ident > 3 and not _WORD.match(tokens[3])):
        raise _RowError("bad type/redop")
    root = None
    if n_ident == 5:
        if not _INT.match(tokens[4]):
            raise _RowError("bad root")
        root = int(tokens[4])
    new_layout = layout == _LAYOUT_NEW
    oop, oop_wrong, _ = _half(tokens[n_ident : n_ident + 4], new_layout)
    inp, inp_wrong, _ = _half(tokens[n_ident + 4 : n_ident + 8], new_layout)
    row = {
        "size_bytes": int(tokens[0]),
        "count": int(tokens[1]),
        "type": tokens[2],
        "redop": tokens[3] if n_ident > 3 else None,
        "root": root,
        "out_of_place": oop,
        "in_place": inp,
    }
    return row, oop_wrong + inp_wrong


def _layout_from_header(tokens: list[str]) -> tuple[str, ...] | None:
    """Column-title line ("#  size  count  type  redop  root  time ...") → row layout."""
    if "size" not in tokens or "count" not in tokens or "time" not in tokens:
        return None
    if "root" in tokens:
        return _LAYOUT_NEW
    if "redop" in tokens:
        return _LAYOUT_OLD
    return _LAYOUT_OLDEST


def _guess_layout(tokens: list[str]) -> tuple[str, ...]:
    """Without a column header, the field count decides (13 / 12 / 11)."""
    return {13: _LAYOUT_NEW, 12: _LAYOUT_OLD, 11: _LAYOUT_OLDEST}.get(len(tokens), _LAYOUT_NEW)


def parse_nccl_tests(text: str, *, ranks: int | None = None) -> ReadinessResult:
    """Parse nccl-tests stdout; malformed, truncated or garbage input gives parse_errors, never raises."""
    result = ReadinessResult(tool=NCCL_TESTS, ranks=ranks)
    try:
        _parse_into(result, text if isinstance(text, str) else str(text), explicit_ranks=ranks)
    except Exception as exc:  # noqa: BLE001 - last-resort guard: a parser bug must fail the test, not the task
        result.parse_errors.append(f"internal parser error: {exc!r}")
    return result


def _parse_into(result: ReadinessResult, text: str, *, explicit_ranks: int | None) -> None:
    layout: tuple[str, ...] | None = None
    rank_ids: set[int] = set()
    ngpus = nthreads = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _MPI_PREFIX.sub("", raw).strip()
        if not line:
            continue
        if _ERROR_LINE.search(line):
            result.error_lines.append(line[:500])
            continue
        if m := _OUT_OF_BOUNDS.match(line):
            result.out_of_bounds = int(m.group(1))
            continue
        if m := _AVG_BUSBW.match(line):
            try:
                avg = float(m.group(1))
                result.avg_busbw_footer = avg if math.isfinite(avg) else None
            except ValueError:
                result.warnings.append(f"line {lineno}: unreadable average {m.group(1)!r}")
            continue
        if line.startswith("#"):
            if m := _RANK_LINE.match(line):
                rank_ids.add(int(m.group(1)))
            elif m := _COLLECTIVE.search(line):
                result.collective = m.group(1)
            elif (m := _NGPUS.search(line)) is not None:
                ngpus = int(m.group(1))
                if mt := _NTHREADS.search(line):
                    nthreads = int(mt.group(1))
            else:
                layout = _layout_from_header(line.lstrip("#").split()) or layout
            continue
        tokens = line.split()
        if not tokens[0].isdigit():
            continue  # NCCL INFO chatter, launcher noise: not ours to judge
        try:
            row, wrong = _parse_row(tokens, layout or _guess_layout(tokens))
        except _RowError as exc:
            result.parse_errors.append(f"line {lineno}: malformed data row ({exc}): {line[:200]!r}")
            continue
        result.rows.append(row)
        result.data_errors += wrong

    if explicit_ranks is None:
        if rank_ids:
            result.ranks = len(rank_ids)
        elif ngpus is not None:
            result.ranks = ngpus * (nthreads or 1)
    _summarise(result, cross_check=result.collective in (None, "all_reduce_perf") and result.ranks)


def _summarise(result: ReadinessResult, *, cross_check: Any) -> None:
    """Fill the largest-size / peak numbers and the structural parse errors."""
    if not result.rows:
        result.parse_errors.append("no data rows (garbage, empty or truncated before the table)")
        return
    if result.out_of_bounds is None:
        result.parse_errors.append("footer 'Out of bounds values' missing (output truncated?)")
    largest = max(r["size_bytes"] for r in result.rows)
    result.largest_size_bytes = largest
    halves = [h for r in result.rows for h in (r["out_of_place"], r["in_place"]) if h]
    result.busbw_peak_gbps = max(h["busbw_gbps"] for h in halves)
    result.busbw_largest_gbps = min(
        h["busbw_gbps"]
        for r in result.rows
        if r["size_bytes"] == largest
        for h in (r["out_of_place"], r["in_place"])
        if h
    )
    if cross_check and result.ranks and result.ranks > 1:
        _cross_check_busbw(result)


def _cross_check_busbw(result: ReadinessResult) -> None:
    """Warn when busbw ≠ algbw × 2(n−1)/n (wrong rank count or a different collective)."""
    for row in result.rows:
        for name in ("out_of_place", "in_place"):
            half = row[name]
            expected = allreduce_busbw(half["algbw_gbps"], result.ranks)
            # Printed with 2 decimals, so allow rounding plus 2 %.
            if abs(half["busbw_gbps"] - expected) > max(0.05, 0.02 * expected):
                result.warnings.append(
                    f"size {row['size_bytes']} {name}: busbw {half['busbw_gbps']} != "
                    f"algbw {half['algbw_gbps']} x 2(n-1)/n for n={result.ranks} ({expected:.2f})"
                )
                return
