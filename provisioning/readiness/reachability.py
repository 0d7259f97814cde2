"""The hybrid's TCP reachability check: parse what the parts printed and decide (pure Python)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# One line per probe, as the agent's probe and the simulated driver print it:
#   reach part 0 (10.96.3.10) -> part 1 10.96.3.11:29400 ok 0.42 ms
#   reach part 0 (10.96.3.10) -> part 1 10.96.3.11:29400 FAILED ConnectionRefusedError: [Errno 111] …
LINE = re.compile(r"^reach part (\d+) \((\S+)\) -> part (\d+) (\S+):(\d+) (ok|FAILED)\s*(.*)$")
MS = re.compile(r"^([0-9.]+) ms$")


@dataclass
class ReachabilityResult:
    """Every probe found, and the verdict: each part reached every other one, and a clean exit."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.reasons


def parse_reachability(text: str, exit_code: int, *, parts: int) -> ReachabilityResult:
    """Pass when every ordered pair of distinct parts has an `ok` line (the last line per pair counts), exit 0."""
    result = ReachabilityResult()
    seen: dict[tuple[int, int], dict] = {}
    for line in (text or "").splitlines():
        m = LINE.match(line.strip())
        if not m:
            continue
        src, _, dst, address, port, status, rest = m.groups()
        ms = MS.match(rest.strip()) if status == "ok" else None
        row = {"from": int(src), "to": int(dst), "address": address, "port": int(port), "ok": status == "ok",
               "ms": float(ms.group(1)) if ms else None, "error": "" if status == "ok" else rest.strip()[:300]}
        result.rows.append(row)
        seen[(row["from"], row["to"])] = row
    if exit_code != 0:
        result.reasons.append(f"exit_code: {exit_code}")
    for src in range(parts):
        for dst in range(parts):
            if src == dst:
                continue
            row = seen.get((src, dst))
            if row is None:
                result.reasons.append(f"missing: part {src} -> part {dst} was not tested")
            elif not row["ok"]:
                result.reasons.append(f"unreachable: part {src} -> part {dst} ({row['address']}:{row['port']}): "
                                      f"{row['error'][:200]}")
    return result
