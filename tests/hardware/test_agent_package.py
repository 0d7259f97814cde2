"""The node agent as shipped: a package of small modules (agent/cardmix_agent/) that `make agent` builds into one
file, build/cardmix-agent.pyz, which runs on a node's own python3 (standard library only) and answers a journal an
agent before the package (1.4.0, one file) left behind."""
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

from .conftest import AGENT_PYTHON, BIN, ROOT, agent_package, built_agent, http, wait_for

MAX_LINES = 400


def test_no_agent_module_is_over_400_lines():
    modules = sorted((ROOT / "agent").rglob("*.py"))
    assert len(modules) > 10, modules  # a package, not one file
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in modules}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_make_agent_builds_one_file_of_the_current_sources():
    pyz = built_agent()
    sources = {str(p.relative_to(ROOT / "agent")): p.read_bytes()
               for p in (ROOT / "agent" / "cardmix_agent").rglob("*.py") if "__pycache__" not in p.parts}
    with zipfile.ZipFile(pyz) as archive:
        files = {name: archive.read(name) for name in archive.namelist() if not name.endswith("/")}
    assert files.pop("__main__.py").decode().splitlines()[-1] == "cardmix_agent.__main__.run()"
    assert files == sources  # every module, as it is now, and nothing else (no __pycache__, no README)
    assert pyz.read_bytes().startswith(b"#!/usr/bin/env python3\n")


def test_the_built_file_runs_alone_on_the_standard_library(tmp_path):
    """Copied away from the repository and run with -I -S (no site-packages, no user site, no PYTHON* variables):
    nothing but the standard library and the file itself."""
    node = tmp_path / "opt" / "cardmix" / "agent"
    node.mkdir(parents=True)
    shutil.copy(built_agent(), node / "cardmix-agent.pyz")
    done = subprocess.run([AGENT_PYTHON, "-I", "-S", str(node / "cardmix-agent.pyz"), "--report", "--runtime",
                           "process", "--nvidia-smi", str(BIN / "nvidia-smi"), "--hostname", "node-1"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["agent_version"] == agent_package().VERSION and report["hostname"] == "node-1"
    assert len(report["devices"]) == 8
    assert subprocess.run([AGENT_PYTHON, "-I", "-S", str(node / "cardmix-agent.pyz"), "--token", "cmxn_x"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"CARDMIX_SERVER": ""}).returncode == 2  # argparse's error: the same CLI


def test_gpu_check_reports_through_the_built_file():
    """bin/gpu-check on a host whose nvidia-smi is the fake one: nvidia-smi's rows, then the .pyz's report."""
    built_agent()  # up to date: the script's own `make agent` has nothing to do
    done = subprocess.run([str(ROOT / "bin" / "gpu-check")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout[done.stdout.index("{"):])
    assert report["agent_version"] == agent_package().VERSION and report["runtime"] == "process"
    assert "build/cardmix-agent.pyz --report" in (ROOT / "bin" / "gpu-check").read_text()


def test_the_systemd_unit_runs_the_built_file():
    unit = (ROOT / "agent" / "cardmix-agent.service").read_text()
    assert "ExecStart=/usr/bin/python3 /opt/cardmix/agent/cardmix-agent.pyz --server" in unit


# Journal entries byte for byte as agent 1.4.0 (agent/cardmix_agent.py, one file) wrote them with
# json.dumps(record): killed while running c-1; killed while acknowledging c-2's start; stopped before c-3's
# result could be posted (kept in its entry).
OLD_JOURNAL = {
    "c-1.json": '{"id": "c-1", "kind": "readiness", "started": 1764667200.25}',
    "c-2.json": '{"id": "c-2", "kind": "wipe", "lease": "lease-c-2", "starting": 1764667201.5}',
    "c-3.json": '{"id": "c-3", "kind": "topology", "started": 1764667202.0, "result": {"exit_code": 0, "output": '
                '"GPU0\\tX\\n", "duration_s": 0.214, "meta": {"argv": ["nvidia-smi", "topo", "-m"]}}}',
}


def test_the_packaged_agent_answers_a_journal_the_one_file_agent_left(tmp_path, raw_server, start_agent):
    state = tmp_path / "state"
    (state / "journal").mkdir(parents=True)
    for name, text in OLD_JOURNAL.items():
        (state / "journal" / name).write_text(text)
    server = raw_server(lambda method, path, body, hits: http(200, {"results": []} if "/commands/?" in path else {}))
    agent = start_agent(server.url, "cmxn_test", state_dir=state)
    wait_for(lambda: server.count("/commands/?limit=1&lease=1") >= 1, timeout=30, what="the first poll")
    results = {p.split("/")[-3]: server.bodies[i] for i, (_, p) in enumerate(server.hits) if p.endswith("/result/")}
    first_poll = next(i for i, (_, p) in enumerate(server.hits) if "/commands/?" in p)
    assert max(i for i, (_, p) in enumerate(server.hits) if p.endswith("/result/")) < first_poll, agent.log_tail()
    assert results["c-1"]["exit_code"] == 75 and results["c-1"]["meta"] == {"agent_restarted": True}
    assert ("the agent restarted while running this command (readiness, started 2025-12-02T09:20:00Z)"
            in results["c-1"]["output"])
    assert results["c-2"]["exit_code"] == 75 and results["c-2"]["lease"] == "lease-c-2"
    assert results["c-2"]["meta"] == {"not_run": True, "agent_restarted": True}
    assert "did not run this command (wipe): the agent restarted before it ran" in results["c-2"]["output"]
    assert results["c-3"] == json.loads(OLD_JOURNAL["c-3.json"])["result"]  # the kept result, as it was
    assert list((state / "journal").iterdir()) == []
    assert Path(agent.proc.args[2]) == built_agent()  # the shipped file answered, not the sources
