"""bench/api_load.py answers --help without touching a database (its Lua scripts are where it looks); bench/scale.py
runs at a tiny size and prints each of its figures."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_api_load_help_lists_the_knobs():
    out = subprocess.run([sys.executable, "-m", "bench.api_load", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    for flag in ("--threads", "--connections", "--duration", "--rounds", "--workers", "--json"):
        assert flag in out
    for script in ("summary.lua", "get_auth.lua", "post_json.lua"):
        assert (ROOT / "bench" / "wrk" / script).is_file()


@pytest.mark.redis
@pytest.mark.timeout(1200)
def test_scale_runs_a_tiny_deployment_and_prints_each_figure():
    """bench.scale at a tiny size: builds, measures with its own workers, beat and web processes, cleans up."""
    import json
    import os
    import shutil

    import psycopg

    if not shutil.which("wrk"):
        pytest.fail("wrk is needed (bin/system-deps installs it)")
    run = subprocess.run([sys.executable, "-m", "bench.scale", "--tiny", "--duration", "2s", "--rounds", "1",
                          "--stop-timeout", "180"], cwd=ROOT, capture_output=True, text=True, timeout=1100,
                         env={**os.environ, "LOG_LEVEL": "WARNING"})
    # Exit 1 is the bench's own verdict that some request errored (counted in its figures below, e.g. a 503 stop
    # under load): the smoke test checks that it runs end to end and reports every figure, not the machine's load.
    assert run.returncode in (0, 1), run.stderr[-3000:]
    out = json.loads([line for line in run.stdout.splitlines() if line.startswith("{")][-1])
    assert (out["nodes"], out["instances"]) == (40, 400)
    assert out["placement"]["wall_p99_ms"] > 0 and out["placement"]["cpu_p99_ms"] > 0
    assert out["tick"]["tick_s"] > 0 and out["tick"]["baseline_s"] > 0
    assert out["api"]["ping_rps"] > 0 and out["api"]["errors"] >= 0
    assert out["stops"]["ticks_seen_s"], "no tick run by the beat was seen"
    assert out["stops"]["stops"] > 0 and out["stops"]["statuses"].get("202", 0) > 0
    assert set(out["stops"]["statuses"]) <= {"202", "503"}, out["stops"]  # 503: retry later, never a 500
    assert out["processes_alive_at_end"] == ["worker1", "worker2", "beat", "web"]
    for figure in ("placement_decide at 40 nodes", "meter tick", "GET /api/v1/instances/?limit=100",
                   "stops during a beat-run tick"):
        assert figure in run.stderr
    from bench.metering import scratch_url

    with psycopg.connect(scratch_url(os.environ["DATABASE_URL"], "postgres"), autocommit=True) as conn:  # dropped
        assert not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [out["database"]]).fetchone()
