"""bench/api_load.py answers --help without touching a database, and its Lua scripts are where it looks."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_api_load_help_lists_the_knobs():
    out = subprocess.run([sys.executable, "-m", "bench.api_load", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    for flag in ("--threads", "--connections", "--duration", "--rounds", "--workers", "--json"):
        assert flag in out
    for script in ("summary.lua", "get_auth.lua", "post_json.lua"):
        assert (ROOT / "bench" / "wrk" / script).is_file()
