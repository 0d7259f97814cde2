"""Smoke test of the placement benchmark harness on a tiny configuration."""

from __future__ import annotations

import json

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
