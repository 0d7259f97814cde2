"""Placement benchmark on the Alibaba openb trace: steady-state churn refusals and decision time.

Churn mode (default): the openb fleet (one accelerator type per GPU model, node sizes kept) is filled
to utilisation U with tasks sampled (seeded, with replacement) from a pod list; then, N times, one
random running task departs and sampled tasks arrive until utilisation is back at U or one is
refused. `ours` starts knowing nothing and learns the workload from this run's arrivals so far
(decayed, `--demand-*`), as production learns it from its recent requests; a task of one named GPU
model is placed as an item request, exactly as `placement_decide` places it, and only a task that
accepts several models (or any) uses the flexible path. Prints one JSON object per (pod list, policy, U)
on stdout and a table on stderr. The openb files
ship in `bench/data/openb/`; `--node-list` and `--pod-list` replay any other cluster's files with
the same columns (see that folder's README).

Timing mode (--timing): decision time of Fleet.place on synthetic 1k and 10k node fleets held at
~70 % fragmented utilisation (the engine alone, over an index already in memory).

Production mode (--production, bench/placement_db.py): `placement_decide` itself on PostgreSQL with 1k and
10k seeded nodes under churn, database reads included, against the full-snapshot path it replaced.

    python -m bench.placement --pod-lists multigpu50 --utilisations 0.97 --seeds 3
    python -m bench.placement --steps 2000 --seeds 1          # quick run
    python -m bench.placement --node-list nodes.csv --pod-list pods.csv   # your own trace
    python -m bench.placement --timing
    DATABASE_URL=postgres://… python -m bench.placement --production
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import sys
import time
from multiprocessing import Pool
from pathlib import Path

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from provisioning.placement import (  # noqa: E402
    CONTAINER,
    AcceleratorInfo,
    DecayedDemand,
    Fleet,
    Item,
    NodeSnapshot,
    PlacementRequest,
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


def catalog_of(nodes: list[NodeSnapshot]) -> dict[str, AcceleratorInfo]:
    """One catalog entry per GPU model of the node list (one vendor, one price: the trace has neither)."""
    return {a: AcceleratorInfo(a, "nvidia", False, 1) for a in sorted({n.accelerator for n in nodes})}


class Learner:
    """What `ours` is told: the arrivals of this run seen so far, decayed per arrival, as production's
    DecayedDemand learns from the requests it has seen; re-read every `refresh` arrivals, as a worker
    re-reads its learned demand once a minute."""

    def __init__(self, fleet: Fleet, half_life: float, refresh: int):
        self.fleet, self.refresh, self.seen = fleet, refresh, 0
        self.factor = 0.5 ** (1 / half_life)
        self.demand = DecayedDemand()

    def observe(self, task: Task) -> None:
        self.demand.decay(self.factor)
        self.demand.observe(task[0], task[1])
        self.seen += 1
        if self.seen % self.refresh == 0:
            self.fleet.set_workload(self.demand.workload())


def place_task(fleet: Fleet, catalog, task: Task, policy: str):
    """A task as production would ask for it: one named card type is an item request, scored as
    `placement_decide` scores it; several types, or any, is a flexible request (what policy mode is for)."""
    count, allowed = task
    if allowed is not None and len(allowed) == 1:
        (acc,) = allowed
        if acc not in catalog:
            return None
        return fleet.place(PlacementRequest(CONTAINER, (Item(acc, count),)), catalog, policy)
    return fleet.place_any(count, allowed, policy)


def churn(job: tuple) -> dict:
    """One (pod list, U, policy, seed) steady-state run; returns raw counters."""
    node_list, pod_list, pod_file, util, policy, seed, steps, half_life, refresh, sees = job
    nodes = load_nodes(Path(node_list))
    tasks = load_tasks(Path(pod_file))
    catalog = catalog_of(nodes)
    fleet = Fleet(nodes)  # no workload yet: it learns it from the arrivals below
    learner = Learner(fleet, half_life, refresh)
    total = sum(n.card_count for n in nodes)
    target = util * total
    rng = random.Random(f"{pod_list}:{util}:{seed}")  # same task stream start for every policy
    running: list[tuple] = []
    used = 0

    def arrive(task: Task) -> bool:
        """One arrival; True when it was placed. The learner sees it as production would: once it
        holds cards (an instance row), or whatever became of it with --demand-sees all."""
        nonlocal used
        result = place_task(fleet, catalog, task, policy)
        ok = result is not None and result.ok
        if ok or sees == "all":
            learner.observe(task)
        if not ok:
            return False
        fleet.allocate(result)
        a = result.assignments[0]
        running.append((a.node_id, a.card_indices))
        used += task[0]
        return True

    misses = 0
    while used < target and misses < 10_000:  # fill; refusals while filling are not counted
        if not arrive(rng.choice(tasks)):
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
            task = rng.choice(tasks)
            count = task[0]
            arrivals += 1
            arrivals4 += count >= 4
            if not arrive(task):
                refused += 1
                refused4 += count >= 4
                break
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
        (str(node_list), label, str(path), u, pol, s, args.steps, args.demand_half_life, args.demand_refresh,
         args.demand_sees)
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
    parser.add_argument("--demand-half-life", type=float, default=2_000,
                        help="arrivals after which a seen request weighs half (what `ours` learns from)")
    parser.add_argument("--demand-refresh", type=int, default=100, help="arrivals between re-reads of the demand")
    parser.add_argument("--demand-sees", choices=("placed", "all"), default="placed",
                        help="placed: only arrivals that got cards (what production's instance rows hold); "
                             "all: refused ones too (as if every refusal were waitlisted)")
    parser.add_argument("--timing", action="store_true", help="measure decision time instead of churn")
    parser.add_argument("--timing-requests", type=int, default=5_000, help="requests timed per fleet size")
    parser.add_argument("--timing-strategy", default="ours", choices=POLICIES)
    parser.add_argument("--production", action="store_true",
                        help="time placement_decide on PostgreSQL (needs DATABASE_URL) instead of churn")
    parser.add_argument("--production-nodes", nargs=2, type=int, default=[1_000, 10_000], metavar=("SMALL", "LARGE"))
    parser.add_argument("--production-requests", type=int, default=1_500,
                        help="timed decisions per fleet size, of each kind (in an open transaction; in its own)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed decisions after the index is built")
    parser.add_argument("--baseline-requests", type=int, default=300, help="timed decisions of the old path")
    parser.add_argument("--busy", type=float, default=0.7, help="share of seeded cards held")
    parser.add_argument("--database-url", default="", help="PostgreSQL server (default: $DATABASE_URL)")
    args = parser.parse_args(argv)
    if args.pod_lists is None:
        args.pod_lists = [] if args.pod_list else list(POD_LISTS)
    try:
        if args.production:
            from bench.placement_db import production

            args.requests = args.production_requests
            rows = production(args)
        else:
            rows = timing(args) if args.timing else run_churn(args)
    except TraceError as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    for row in rows:
        print(json.dumps(row), flush=True)
    if args.production:
        for r in rows[:-1]:
            print(f"{r['nodes']:>6} nodes: placement_decide wall p50 {r['wall_median_ms']} ms, p99 {r['wall_p99_ms']} ms; "
                  f"CPU p50 {r['cpu_median_ms']} ms, p99 {r['cpu_p99_ms']} ms; in its own transaction wall p99 "
                  f"{r['own_transaction_wall_p99_ms']} ms (full snapshot: p50 {r['full_snapshot_median_ms']} ms, "
                  f"p99 {r['full_snapshot_p99_ms']} ms); load average {r['load_average'][0]}–{r['load_average'][1]}",
                  file=sys.stderr)
        last = rows[-1]
        large, small = last["sizes"][1], last["sizes"][0]
        print(f"p99 {large} / {small} nodes = {last['ratio_p99_large_small']} (CPU {last['ratio_cpu_p99_large_small']})",
              file=sys.stderr)
        print(f"goal p99 ≤ {last['goal_p99_ms_at_large']} ms at {large} nodes (wall): "
              f"{'MET' if last['met_p99'] else 'NOT MET'}; goal p99 {large}/{small} ≤ {last['goal_ratio_p99']}: "
              f"{'MET' if last['met_ratio'] else 'NOT MET'}", file=sys.stderr)
    elif not args.timing:
        print(table(rows), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
