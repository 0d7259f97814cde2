"""Smoke test of the placement benchmark harness on a tiny configuration."""

from __future__ import annotations

import json

import pytest

from bench import placement as bench

KEYS = {
    "policy",
    "utilisation",
    "refused_share",
    "refused_share_sd",
    "refused_share_4plus",
    "refused_share_4plus_sd",
    "free_whole_nodes",
    "free_whole_nodes_sd",
}


def test_churn_prints_one_json_object_per_policy_and_utilisation(capsys):
    argv = [
        "--pod-lists",
        "gpuspec33",
        "--utilisations",
        "0.9",
        "0.97",
        "--seeds",
        "1",
        "--steps",
        "300",
        "--processes",
        "1",
    ]
    assert bench.main(argv) == 0
    out = capsys.readouterr()
    rows = [json.loads(line) for line in out.out.splitlines()]
    assert {(r["policy"], r["utilisation"]) for r in rows} == {
        (p, u) for p in ("spread", "first_fit", "best_fit", "ours") for u in (0.9, 0.97)
    }
    for row in rows:
        assert KEYS <= row.keys()
        assert 0.0 <= row["refused_share"] <= 1.0 and 0.0 <= row["refused_share_4plus"] <= 1.0
        assert 0 <= row["free_whole_nodes"] <= 617  # 8-card nodes in the openb fleet
        assert row["arrivals"] > 0
    assert "refused" in out.err  # the readable table


def test_timing_mode_reports_median_and_p99(capsys):
    assert bench.main(["--timing", "--timing-requests", "300"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    sizes = [r for r in rows if "nodes" in r]
    assert [r["nodes"] for r in sizes] == [1_000, 10_000]
    assert all(0 < r["median_ms"] <= r["p99_ms"] for r in sizes)
    assert any("ratio_10k_1k_p99_ms" in r for r in rows)


QUICK = ["--utilisations", "0.97", "--seeds", "1", "--steps", "200", "--processes", "1"]


def _rows(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_a_pod_list_file_of_ones_own_prints_what_the_named_list_prints(tmp_path, capsys):
    own = tmp_path / "gpuspec33.csv"
    own.write_bytes((bench.DEFAULT_TRACES / "openb_pod_list_gpuspec33.csv").read_bytes())
    assert bench.main(["--pod-lists", "gpuspec33", *QUICK]) == 0
    named = _rows(capsys)
    assert bench.main(["--pod-list", str(own), *QUICK]) == 0
    assert _rows(capsys) == named


def test_own_node_and_pod_lists_are_replayed(tmp_path, capsys):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,gpu,model\n" + "".join(f"n{i},8,H100\n" for i in range(4)) + "s0,4,910B\n")
    pods = tmp_path / "lab.csv"
    pods.write_text("num_gpu,gpu_milli,gpu_spec\n8,1000,\n1,500,\n2,1000,910B\n0,0,\n4,1000,H100\n")
    assert bench.main(["--node-list", str(nodes), "--pod-list", str(pods), "--pod-list", str(pods), *QUICK]) == 0
    rows = _rows(capsys)
    assert {(r["pod_list"], r["policy"]) for r in rows} == {("lab", p) for p in bench.POLICIES}
    assert all(r["arrivals"] > 0 and 0 <= r["free_whole_nodes"] <= 4 for r in rows)


def test_a_pod_list_without_the_needed_columns_is_one_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,gpus\na,1\n")
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--pod-list", str(bad), *QUICK])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "bad.csv: missing column(s) num_gpu, gpu_milli" in err
    with pytest.raises(SystemExit):
        bench.main(["--pod-list", str(tmp_path / "absent.csv"), *QUICK])
    assert "absent.csv: No such file or directory" in capsys.readouterr().err


def test_make_bench_runs_each_benchmark_and_ends_with_its_ratios(capsys):
    from bench import __main__ as runner

    assert runner.main(["placement-timing"]) == 0
    out = capsys.readouterr().out
    table = out.split("=== benchmark ratios")[1]
    assert "placement-timing  ok" in table and "decision p99 10k / 1k nodes = " in table
    assert runner.main(["no-such-bench"]) == 2


def test_ours_learns_only_from_the_arrivals_it_has_seen():
    nodes = [bench.NodeSnapshot(f"n{i}", bench.ZONE, "A" if i < 2 else "B", 8, frozenset(range(8))) for i in range(4)]
    fleet = bench.Fleet(nodes)
    learner = bench.Learner(fleet, half_life=10, refresh=2)
    learner.observe((1, frozenset({"A"})))
    assert fleet.workload is None  # not re-read yet: nothing is known before the first refresh
    learner.observe((8, None))
    assert fleet.workload.sizes == pytest.approx({1: 0.5 ** 0.1 / (1 + 0.5 ** 0.1), 8: 1 / (1 + 0.5 ** 0.1)})
    assert set(fleet.workload.constrained) == {frozenset({"A"})}
    assert fleet.model.pressure["A"] > 0 and "B" not in fleet.model.pressure


def test_a_task_of_one_named_model_is_placed_as_an_item_request():
    nodes = [bench.NodeSnapshot("a", bench.ZONE, "A", 4, frozenset(range(4)))]
    fleet, catalog = bench.Fleet(nodes), bench.catalog_of(nodes)
    assert bench.place_task(fleet, catalog, (8, frozenset({"A"})), "ours").error_code == "invalid_request"
    assert bench.place_task(fleet, catalog, (2, frozenset({"C"})), "ours") is None  # no such model: refused
    assert bench.place_task(fleet, catalog, (2, frozenset({"A"})), "ours").ok
    assert bench.place_task(fleet, catalog, (2, None), "ours").ok


@pytest.mark.timeout(600)
def test_production_mode_times_placement_decide_on_postgresql():
    import os
    import subprocess
    import sys

    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        url = "postgres://postgres@127.0.0.1:5432/postgres"
    # Its own process: it sets Django up on a scratch database of its own.
    run = subprocess.run([sys.executable, "-m", "bench.placement", "--production", "--production-nodes", "40", "80",
                          "--production-requests", "40", "--warmup", "5", "--baseline-requests", "5"],
                         cwd=bench.DEFAULT_TRACES.parent.parent.parent, env={**os.environ, "DATABASE_URL": url},
                         capture_output=True, text=True, timeout=500)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    sizes = [r for r in rows if r.get("mode") == "production"]
    assert [r["nodes"] for r in sizes] == [40, 80]
    assert all(0 < r["wall_median_ms"] <= r["wall_p99_ms"] and r["requests"] == 40 for r in sizes)
    assert all(0.5 <= r["utilisation"] <= 0.85 for r in sizes)
    assert rows[-1]["ratio_p99_large_small"] > 0 and "p99 80 / 40 nodes" in run.stderr
