"""The agent's health probe (the built .pyz, run as `--report` against the stand-in tools): what it sends is what
the platform's parsers read, healthy while the cards are, and Xid 79 on the card that fell off the bus."""
import json
import os
import subprocess
import sys

from hardware.health import parse_probe
from hardware.health.parsers import card_buses
from tests.hardware.conftest import BIN, built_agent


def report(tmp_path, faults=None, *extra):
    env = {**os.environ, "CARDMIX_AGENT_TOKEN": ""}
    if faults is not None:
        path = tmp_path / "faults.json"
        path.write_text(json.dumps(faults))
        env["CARDMIX_FAKE_GPU_FAULTS"] = str(path)
    done = subprocess.run([sys.executable, str(built_agent()), "--report", "--runtime", "process", "--vendor",
                           "nvidia", "--nvidia-smi", str(BIN / "nvidia-smi"), "--dmesg", str(BIN / "dmesg"),
                           "--npu-smi", str(BIN / "npu-smi"), "--state-dir", str(tmp_path / "state"), *extra],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_healthy_host_sends_every_section_and_nothing_is_wrong(tmp_path):
    probe = report(tmp_path)["health_probe"]
    assert set(probe) == {"nvidia_gpu", "nvidia_remap", "nvlink", "kernel_xid"}
    assert all(section["exit_code"] == 0 for section in probe.values())
    assert parse_probe(probe) == []


def test_a_card_fallen_off_the_bus_is_xid_79_on_that_card(tmp_path):
    known = card_buses(report(tmp_path)["health_probe"])  # the platform remembers them from earlier heartbeats
    assert len(known) == 8
    signals = parse_probe(report(tmp_path, {"fallen": [5]})["health_probe"], known)
    failed = [s for s in signals if s.klass == "failed"]
    assert [(s.kind, s.code, s.card) for s in failed] == [("xid", 79, 5)]
    # The health query cannot reach the card either: that line is unparsed, never healthy.
    assert any(s.klass == "unparsed" and "device handle" in s.detail for s in signals)


def test_an_ascend_host_sends_npu_smi_info(tmp_path):
    done = subprocess.run([sys.executable, str(built_agent()), "--report", "--runtime", "process", "--vendor",
                           "huawei", "--npu-smi", str(BIN / "npu-smi"), "--state-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "CARDMIX_AGENT_TOKEN": ""})
    probe = json.loads(done.stdout)["health_probe"]
    assert list(probe) == ["npu"] and parse_probe(probe) == []


def test_xid_lines_are_picked_before_the_tail_is_cut():
    from tests.hardware.conftest import agent_package

    health = agent_package("health")
    log = "\n".join([f"[ {i}.0] NVRM: Xid (PCI:0000:3b:00): 13, pid={i}, x" for i in range(80)]
                    + ["[ 99.0] usb 1-1: new device " + "x" * 100] * 500)
    picked = health.xid_lines(log).splitlines()
    assert len(picked) == health.XID_LINES and picked[-1].endswith("pid=79, x") and all("Xid" in ln for ln in picked)
