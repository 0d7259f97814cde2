"""`make bench`: every benchmark at a quick size, one after the other, then one table of their ratios.

Each benchmark prints its own output as it runs (its JSON on stdout, its table on stderr); the
table at the end picks the ratio each one judges by. Quick sizes are for seeing the figures move,
not for the closing numbers of an issue: run a benchmark on its own at its default size for those
(docs/performance/README.md says how). Needs PostgreSQL (DATABASE_URL) and Redis (REDIS_URL) for the
database benchmarks, and wrk for the API one; a benchmark whose service is missing is reported
as skipped.

    .venv/bin/python -m bench                   # all of them
    .venv/bin/python -m bench placement metering
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _json_lines(out: str) -> list[dict]:
    rows = []
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def _churn(rows: list[dict], _: Path) -> list[str]:
    by = {(r["pod_list"], r["policy"]): r["refused_share"] for r in rows}
    lines = []
    for pod_list in sorted({p for p, _ in by}):
        ours, best = by.get((pod_list, "ours")), by.get((pod_list, "best_fit"))
        if ours is not None and best is not None:
            ratio = f"{ours / best:.3f}" if best else "n/a (best_fit refused none)"
            lines.append(f"{pod_list}: refused ours / best_fit = {ratio} ({100 * ours:.2f} % vs {100 * best:.2f} %)")
    return lines


def _timing(rows: list[dict], _: Path) -> list[str]:
    ratios = {k: v for r in rows for k, v in r.items() if k.startswith("ratio_")}
    p99 = {r["nodes"]: r["p99_ms"] for r in rows if "nodes" in r}
    return [f"decision p99 10k / 1k nodes = {ratios.get('ratio_10k_1k_p99_ms')} "
            f"({p99.get(1000)} ms, {p99.get(10000)} ms; in-memory index)"]


def _production(rows: list[dict], _: Path) -> list[str]:
    ratio = rows[-1]
    p99 = {r["nodes"]: r["wall_p99_ms"] for r in rows if "nodes" in r}
    small, large = ratio["sizes"]
    return [f"placement_decide p99 {large} / {small} nodes = {ratio['ratio_p99_large_small']} "
            f"({p99.get(small)} ms, {p99.get(large)} ms; PostgreSQL, reads included)"]


def _metering(rows: list[dict], _: Path) -> list[str]:
    r = rows[-1]
    return [f"tick / raw SQL baseline at {r['meters']} meters = {r['ratio']}"]


def _provisioning(rows: list[dict], _: Path) -> list[str]:
    r = rows[-1]
    return [f"{r['instances_per_s']} instances/s; share of wall time outside the driver = "
            f"{r['share_outside_driver']}"]


def _api(_: list[dict], json_path: Path) -> list[str]:
    results = json.loads(json_path.read_text())["results"]
    base = results[0]
    return [f"{r['target']}: req/s ratio {r['rps'] / base['rps']:.3f}, p99 ratio {r['p99_us'] / base['p99_us']:.2f}"
            for r in results[1:]]


def _scale(rows: list[dict], _: Path) -> list[str]:
    r = rows[-1]
    p, t, a, s = r["placement"], r["tick"], r["api"], r["stops"]
    return [f"{r['nodes']} nodes, {r['instances']} instances: placement_decide p99 {p['wall_p99_ms']} ms "
            f"(CPU {p['cpu_p99_ms']} ms); tick / raw baseline = {t['ratio']}",
            f"instances?limit=100 / ping req/s = {a['ratio']}; stop p99 during a beat-run tick "
            f"{s['during_p99_ms']} ms ({s['during_tick']} stops), with no tick {s['no_tick_p99_ms']} ms"]


# name → (arguments at a quick size, what it needs, how its ratios are read)
BENCHMARKS = {
    "placement": (["bench.placement", "--utilisations", "0.97", "--seeds", "1", "--steps", "2000"], (), _churn),
    "placement-timing": (["bench.placement", "--timing", "--timing-requests", "2000"], (), _timing),
    "placement-production": (["bench.placement", "--production", "--production-requests", "500",
                              "--baseline-requests", "30"], ("pg",), _production),
    "metering": (["bench.metering", "--meters", "2000", "--repeat", "3"], ("pg",), _metering),
    "provisioning": (["bench.provisioning", "--instances", "20"], ("pg", "redis"), _provisioning),
    "scale": (["bench.scale", "--quick", "--duration", "3s", "--rounds", "1"], ("pg", "redis", "wrk"), _scale),
    "api": (["bench.api_load", "--duration", "3s", "--rounds", "1", "--json", "{json}"], ("pg", "wrk"), _api),
}


def _missing(needs: tuple[str, ...]) -> list[str]:
    have = {
        "pg": os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")),
        "redis": bool(os.environ.get("REDIS_URL")),
        "wrk": shutil.which("wrk") is not None,
    }
    return [n for n in needs if not have[n]]


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    summary: list[tuple[str, str, list[str]]] = []
    for name in names:
        args, needs, read = BENCHMARKS[name]
        missing = _missing(needs)
        if missing:
            summary.append((name, "skipped", [f"needs {', '.join(missing)}"]))
            continue
        json_path = Path(tempfile.mkstemp(prefix=f"cardmix-bench-{name}-", suffix=".json")[1])
        cmd = [sys.executable, "-m", *[a.replace("{json}", str(json_path)) for a in args]]
        print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.time()
        run = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        sys.stdout.write(run.stdout)
        took = f"{time.time() - t0:.0f} s"
        try:
            lines = read(_json_lines(run.stdout), json_path) if run.returncode == 0 else []
        except (KeyError, IndexError, ValueError, OSError) as e:
            lines = [f"could not read its figures: {e!r}"]
        json_path.unlink(missing_ok=True)
        summary.append((name, f"ok, {took}" if run.returncode == 0 else f"FAILED (exit {run.returncode})", lines))
    print("\n=== benchmark ratios (quick sizes; same-run baselines)")
    for name, status, lines in summary:
        print(f"{name:<17} {status}")
        for line in lines:
            print(f"{'':<17}   {line}")
    return 0 if all(not s.startswith("FAILED") for _, s, _ in summary) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
