"""Placement benchmark on the Alibaba openb trace: steady-state churn refusals and decision time.

Churn mode (default): the openb fleet (one accelerator type per GPU model, node sizes kept) is filled
to utilisation U with tasks sampled (seeded, with replacement) from a pod list; then, N times, one
random running task departs and sampled tasks arrive until utilisation is back at U or one is
refused. Prints one JSON object per (pod list, policy, U) on stdout and a table on stderr. The openb files
ship in `bench/data/openb/`; `--node-list` and `--pod-list` replay any other cluster's files with
the same columns (see that folder's README).

Timing mode (--timing): decision time of Fleet.place on synthetic 1k and 10k node fleets held at
~70 % fragmented utilisation.

    python -m bench.placement --pod-lists multigpu50 --utilisations 0.97 --seeds 3
    python -m bench.placement --steps 2000 --seeds 1          # quick run
    python -m bench.placement --node-list nodes.csv --pod-list pods.csv   # your own trace
    python -m bench.placement --timing
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import sys
import time
from collections import Counter
from multiprocessing import Pool
from pathlib import Path

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from provisioning.placement import (  # noqa: E402
    CONTAINER,
    AcceleratorInfo,
    Fleet,
    Item,
    NodeSnapshot,
    PlacementRequest,
    Workload,
)

DEFAULT_TRACES = Path(__file__).resolve().parent / "data" / "openb"
NODE_LIST = "openb_node_list_gpu_node.csv"
POD_LISTS = ("default", "multigpu50", "gpuspec33")
POLICIES = ("spread", "first_fit", "best_fit", "ours")
ZONE = "openb"

Task = tuple[int, frozenset[str] | None]  # (cards, allowed accelerators or None for any)


class TraceError(ValueError):
    """A node or pod list the benchmark cannot read (missing file, column or bad value)."""


def _rows(path: Path, needed: tuple[str, ...]) -> list[dict]:
    """The CSV's rows, after checking it has the columns the benchmark reads."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in needed if c not in (reader.fieldnames or ())]
            if missing:
                raise TraceError(f"{path}: missing column(s) {', '.join(missing)} (needs {', '.join(needed)})")
            return list(reader)
    except OSError as e:
        raise TraceError(f"{path}: {e.strerror}") from e


def load_nodes(path: Path) -> list[NodeSnapshot]:
    """A node list (sn, gpu, model) as fully free snapshots in one zone."""
    rows = _rows(path, ("sn", "gpu", "model"))
    try:
        nodes = [
            NodeSnapshot(r["sn"], ZONE, r["model"], int(r["gpu"]), frozenset(range(int(r["gpu"])))) for r in rows
        ]
    except ValueError as e:
        raise TraceError(f"{path}: {e}") from e
    if not nodes:
        raise TraceError(f"{path}: no nodes")
    return nodes


def load_tasks(path: Path) -> list[Task]:
    """GPU tasks of a pod list as (whole cards, allowed models); CPU-only tasks are dropped."""
    tasks: list[Task] = []
    for line, r in enumerate(_rows(path, ("num_gpu", "gpu_milli")), start=2):
        try:
            num_gpu, milli = int(r["num_gpu"]), int(r["gpu_milli"])
        except ValueError as e:
            raise TraceError(f"{path}, line {line}: {e}") from e
        if num_gpu == 0 and milli == 0:
            continue
        spec = (r.get("gpu_spec") or "").strip()
        tasks.append((max(1, num_gpu), frozenset(spec.split("|")) if spec else None))
    if not tasks:
        raise TraceError(f"{path}: no GPU tasks")
    return tasks


def pod_list_files(args) -> list[tuple[str, Path]]:
    """(label, file) of every pod list asked for: the named openb lists, then --pod-list files."""
    named = [(name, args.traces / f"openb_pod_list_{name}.csv") for name in args.pod_lists]
    # A file's label is its name without openb's prefix, and it seeds the task stream: a copy of a
    # named list replays exactly the named list's runs.
    return named + [(path.stem.removeprefix("openb_pod_list_"), path) for path in args.pod_list]


def workload_of(tasks: list[Task]) -> Workload:
    """The distribution the "ours" policy is told about: sizes and constrained-accelerator shares."""
    sizes = Counter(k for k, _ in tasks)
    constrained = Counter(allowed for _, allowed in tasks if allowed is not None)
    n = len(tasks)
    return Workload(
        sizes={k: v / n for k, v in sizes.items()},
        constrained={a: v / n for a, v in constrained.items()},
    )


def churn(job: tuple) -> dict:
    """One (pod list, U, policy, seed) steady-state run; returns raw counters."""
    node_list, pod_list, pod_file, util, policy, seed, steps = job
    nodes = load_nodes(Path(node_list))
    tasks = load_tasks(Path(pod_file))
    fleet = Fleet(nodes, workload_of(tasks))
    total = sum(n.card_count for n in nodes)
    target = util * total
    rng = random.Random(f"{pod_list}:{util}:{seed}")  # same task stream start for every policy
    running: list[tuple] = []
    used = 0

    def arrive() -> bool:
        nonlocal used
        count, allowed = rng.choice(tasks)
        result = fleet.place_any(count, allowed, policy)
        if not result.ok:
            return False
        fleet.allocate(result)
        a = result.assignments[0]
        running.append((a.node_id, a.card_indices))
        used += count
        return True

    misses = 0
    while used < target and misses < 10_000:  # fill; refusals while filling are not counted
        if not arrive():
            misses += 1
    arrivals = refused = arrivals4 = refused4 = 0
    for _ in range(steps):
        if running:
            i = rng.randrange(len(running))
            running[i], running[-1] = running[-1], running[i]
            node_id, cards = running.pop()
            fleet.release(node_id, cards)
            used -= len(cards)
        while used < target:
            count, allowed = rng.choice(tasks)
            arrivals += 1
            arrivals4 += count >= 4
            result = fleet.place_any(count, allowed, policy)
            if not result.ok:
                refused += 1
                refused4 += count >= 4
                break
            fleet.allocate(result)
            a = result.assignments[0]
            running.append((a.node_id, a.card_indices))
            used += count
    free_whole = sum(1 for n in fleet.snapshot() if n.card_count == 8 and len(n.free) == 8)
    return {
        "pod_list": pod_list,
        "utilisation": util,
        "policy": policy,
        "seed": seed,
        "arrivals": arrivals,
        "refused": refused,
        "arrivals_4plus": arrivals4,
        "refused_4plus": refused4,
        "free_whole_nodes": free_whole,
    }


def _mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def summarise(runs: list[dict], steps: int) -> list[dict]:
    """Mean and sd over seeds per (pod list, policy, U)."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["pod_list"], r["utilisation"], r["policy"]), []).append(r)
    out = []
    for (pod_list, util, policy), rs in sorted(
        groups.items(), key=lambda g: (g[0][0], g[0][1], POLICIES.index(g[0][2]))
    ):
        share = [r["refused"] / r["arrivals"] if r["arrivals"] else 0.0 for r in rs]
        share4 = [r["refused_4plus"] / r["arrivals_4plus"] if r["arrivals_4plus"] else 0.0 for r in rs]
        free = [float(r["free_whole_nodes"]) for r in rs]
        (m, sd), (m4, sd4), (mf, sdf) = _mean_sd(share), _mean_sd(share4), _mean_sd(free)
        out.append(
            {
                "pod_list": pod_list,
                "policy": policy,
                "utilisation": util,
                "refused_share": round(m, 5),
                "refused_share_sd": round(sd, 5),
                "refused_share_4plus": round(m4, 5),
                "refused_share_4plus_sd": round(sd4, 5),
                "free_whole_nodes": round(mf, 2),
                "free_whole_nodes_sd": round(sdf, 2),
                "arrivals": sum(r["arrivals"] for r in rs),
                "seeds": len(rs),
                "steps": steps,
            }
        )
    return out


def table(rows: list[dict]) -> str:
    """Readable table of the summary rows."""
    head = f"{'pod list':<11} {'U':>5} {'policy':<10} {'refused %':>16} {'refused >=4 %':>16} {'free 8-card':>14}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['pod_list']:<11} {r['utilisation']:>5} {r['policy']:<10} "
            f"{100 * r['refused_share']:>7.2f} ± {100 * r['refused_share_sd']:<6.2f} "
            f"{100 * r['refused_share_4plus']:>7.2f} ± {100 * r['refused_share_4plus_sd']:<6.2f} "
            f"{r['free_whole_nodes']:>6.1f} ± {r['free_whole_nodes_sd']:<5.1f}"
        )
    return "\n".join(lines)


def run_churn(args) -> list[dict]:
    """Run every (pod list, U, policy, seed) job, in `--processes` worker processes."""
    node_list = args.node_list or args.traces / NODE_LIST
    pod_lists = pod_list_files(args)
    load_nodes(node_list)  # a bad file is one clear error here, not one per worker process
    for _, path in pod_lists:
        load_tasks(path)
    jobs = [
        (str(node_list), label, str(path), u, pol, s, args.steps)
        for label, path in pod_lists
        for u in args.utilisations
        for pol in args.policies
        for s in range(args.seeds)
    ]
    if args.processes > 1:
        with Pool(args.processes) as pool:
            runs = list(pool.imap_unordered(churn, jobs))
    else:
        runs = [churn(j) for j in jobs]
    return summarise(runs, args.steps)


def synthetic_fleet(n_nodes: int, rng: random.Random, busy: float = 0.7) -> list[NodeSnapshot]:
    """8-card nodes over 4 zones and 4 types; each card busy with probability `busy` (fragmented)."""
    accs = ("h800", "h20", "910b", "mlu590")
    nodes = []
    for i in range(n_nodes):
        free = frozenset(c for c in range(8) if rng.random() >= busy)
        nodes.append(NodeSnapshot(f"n{i}", f"z{i % 4}", accs[(i // 4) % 4], 8, free))
    return nodes


def timing(args) -> list[dict]:
    """Median and p99 decision time of Fleet.place on 1k and 10k synthetic nodes."""
    catalog = [
        AcceleratorInfo("h800", "nvidia", False, 20_000_000),
        AcceleratorInfo("h20", "nvidia", False, 9_000_000),
        AcceleratorInfo("910b", "huawei", True, 12_000_000),
        AcceleratorInfo("mlu590", "cambricon", True, 8_000_000),
    ]
    out = []
    for n_nodes in (1_000, 10_000):
        rng = random.Random(n_nodes)
        fleet = Fleet(synthetic_fleet(n_nodes, rng))
        requests = [
            PlacementRequest(CONTAINER, (Item(rng.choice(catalog).slug, rng.choice((1, 1, 2, 4, 8))),))
            for _ in range(args.timing_requests)
        ]
        for r in requests[:200]:  # warm-up
            fleet.place(r, catalog, args.timing_strategy)
        wall, cpu = [], []
        for r in requests:
            c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
            result = fleet.place(r, catalog, args.timing_strategy)
            wall.append((time.perf_counter_ns() - t0) / 1e6)
            cpu.append((time.thread_time_ns() - c0) / 1e6)
            if result.ok:  # exercise the index updates, but give the cards back so U stays ~70 %
                fleet.allocate(result)
                for a in result.assignments:
                    fleet.release(a.node_id, a.card_indices)
        wall.sort()
        cpu.sort()
        out.append(
            {
                "nodes": n_nodes,
                "strategy": args.timing_strategy,
                "requests": len(wall),
                "utilisation": round(1 - sum(len(f) for f in fleet.index.free) / (8 * n_nodes), 3),
                # CPU time of this thread excludes preemption by other processes on a shared machine.
                "median_ms": round(statistics.median(cpu), 4),
                "p99_ms": round(cpu[int(0.99 * len(cpu))], 4),
                "wall_median_ms": round(statistics.median(wall), 4),
                "wall_p99_ms": round(wall[int(0.99 * len(wall))], 4),
            }
        )
    for key in ("median_ms", "p99_ms", "wall_median_ms", "wall_p99_ms"):
        out.append({"ratio_10k_1k_" + key: round(out[1][key] / out[0][key], 3)})
    return out


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="folder with the openb CSV files")
    parser.add_argument("--pod-lists", nargs="*", default=None, choices=POD_LISTS,
                        help="named openb pod lists (default: all three, unless --pod-list is given)")
    parser.add_argument("--pod-list", type=Path, action="append", default=[], metavar="PATH",
                        help="a pod-list CSV of your own (num_gpu, gpu_milli[, gpu_spec]); repeatable")
    parser.add_argument("--node-list", type=Path, default=None, metavar="PATH",
                        help="a node-list CSV (sn, gpu, model); default: the openb node list")
    parser.add_argument("--utilisations", nargs="+", type=float, default=[0.90, 0.97], help="target U")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    parser.add_argument("--steps", type=int, default=30_000, help="departures per run after the fill")
    parser.add_argument("--seeds", type=int, default=10, help="seeds per (pod list, U, policy)")
    parser.add_argument("--processes", type=int, default=2, help="worker processes")
    parser.add_argument("--timing", action="store_true", help="measure decision time instead of churn")
    parser.add_argument("--timing-requests", type=int, default=5_000, help="requests timed per fleet size")
    parser.add_argument("--timing-strategy", default="ours", choices=POLICIES)
    args = parser.parse_args(argv)
    if args.pod_lists is None:
        args.pod_lists = [] if args.pod_list else list(POD_LISTS)
    try:
        rows = timing(args) if args.timing else run_churn(args)
    except TraceError as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    for row in rows:
        print(json.dumps(row), flush=True)
    if not args.timing:
        print(table(rows), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
