"""The web processes freeze what start-up built and collect the young generation less often (core/gc_tuning.py):
an instance list page paid about a fifth of its CPU for collections. Checked in a fresh interpreter that loads the
entry point as uvicorn and gunicorn do, so the test process's own collector is left alone."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import gc, json, sys
before = gc.get_threshold()[0]
import importlib
importlib.import_module(sys.argv[1])
loaded_after = "provisioning.api.views" in sys.modules
print(json.dumps({"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count(), "enabled": gc.isenabled(),
                  "before": before, "views_loaded": loaded_after}))
"""


def _probe(module: str, **env) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "GC_GEN0_THRESHOLD"}
    environ.update(DJANGO_SETTINGS_MODULE="config.settings", **env)
    out = subprocess.run([sys.executable, "-c", _PROBE, module], cwd=ROOT, env=environ, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["config.asgi", "config.wsgi"])
def test_the_entry_points_freeze_start_up_and_raise_the_young_threshold(module):
    got = _probe(module)
    assert got["before"] < 50_000  # CPython's default (700 on 3.11) was raised
    assert got["threshold"][0] == 50_000
    assert got["enabled"]  # collections still run: cycles made while serving are freed
    # Django, the apps and every view module (the URL patterns are loaded before freezing): far more than the
    # interpreter alone holds.
    assert got["frozen"] > 50_000
    assert got["views_loaded"]


def test_the_threshold_is_a_setting():
    assert _probe("config.wsgi", GC_GEN0_THRESHOLD="1234")["threshold"][0] == 1234
