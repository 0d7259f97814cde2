"""Pure pieces: the agent's docker command line and device parsing, BMC secrets, the driver registry."""
from argparse import Namespace
from pathlib import Path

import pytest

from hardware.bmc_secrets import bmc_decrypt, bmc_encrypt
from hardware.selectors import BmcLogin
from provisioning.drivers import driver_names
from tenancy.authentication import BearerTokenAuthentication

from .conftest import agent_package, built_agent

agent_mod = agent_package()


def make_agent(tmp_path):
    args = Namespace(server="http://x", token="cmxn_x", state_dir=str(tmp_path), heartbeat_interval=1.0,
                     vendor="nvidia", ca_file="", docker="docker", shm_size="64g")
    return agent_mod.Agent(args)


def test_docker_argv_nvidia_and_ascend(tmp_path):
    agent = make_agent(tmp_path)
    nvidia = agent.runtime.docker_run_argv({"instance_id": "i1", "cards": [0, 1], "image": "pytorch:2.3", "vendor": "nvidia",
                                    "collective": "nccl", "env": {"NCCL_DEBUG": "WARN"}}, tmp_path / "keys")
    assert nvidia[nvidia.index("--gpus") + 1] == '"device=0,1"'
    assert nvidia[-1] == "pytorch:2.3" and "NCCL_DEBUG=WARN" in nvidia
    assert f"{tmp_path / 'keys'}:/root/.ssh/authorized_keys:ro" in nvidia
    ascend = agent.runtime.docker_run_argv({"instance_id": "i2", "cards": [2, 5], "image": "cann", "vendor": "huawei",
                                    "collective": "hccl", "env": {}}, tmp_path / "keys")
    devices = [ascend[i + 1] for i, a in enumerate(ascend) if a == "--device"]
    assert devices == ["/dev/davinci2", "/dev/davinci5", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    assert "--gpus" not in ascend


def test_device_parsing_and_output_clipping():
    rows = agent_mod.parse_nvidia_query("0, NVIDIA H800, GPU-abc, 81559 MiB, 535.104.05, 35, 12 %\nNo devices\n")
    assert rows == [{"index": 0, "name": "NVIDIA H800", "uuid": "GPU-abc", "memory_total_mib": 81559,
                     "driver_version": "535.104.05", "temperature_c": 35, "utilization_pct": 12}]
    npu = agent_mod.parse_npu_info("| 0     910B3               | OK            | 95.7        47                0    / 0             |\n"
                                   "| 0                         | 0000:C1:00.0  | 0           0    / 0          3396 / 65536         |\n")
    assert [(d["index"], d["name"]) for d in npu] == [(0, "910B3")]
    long = "a" * 200_000 + "TAIL"
    clipped = agent_mod.clip(long + "b" * 200_000)
    assert len(clipped) < 270_000 and "characters omitted" in clipped


def test_agent_run_reports_missing_program_and_timeout():
    assert agent_mod.run(["/nonexistent/tool"], timeout=5) == ("cardmix-agent: /nonexistent/tool: command not found\n", 127)
    text, code = agent_mod.run(["sleep", "5"], timeout=0.2)
    assert code == 124 and "timeout" in text


def test_bmc_secret_round_trip_and_never_in_repr(settings):
    settings.BMC_CREDENTIALS_KEY = "R9Bq0u1xk1Y9iYQ6x5m1e3p4v2o7n8b0c6z5a4s3d2f="
    blob = bmc_encrypt("hunter2-bmc")
    assert b"hunter2" not in blob and bmc_decrypt(blob) == "hunter2-bmc"
    settings.BMC_CREDENTIALS_KEY = "Z" * 43 + "="
    with pytest.raises(ValueError, match="cannot be decrypted"):
        bmc_decrypt(blob)
    assert "hunter2" not in repr(BmcLogin(address="https://bmc", username="root", password="hunter2",
                                          verify_tls=True))


def test_registry_and_user_token_auth_refuses_node_tokens(rf):
    assert {"simulated", "agent", "redfish"} <= set(driver_names())
    request = rf.get("/api/v1/accelerators/", HTTP_AUTHORIZATION="Bearer cmxn_" + "a" * 43)
    from rest_framework.exceptions import AuthenticationFailed

    with pytest.raises(AuthenticationFailed):
        BearerTokenAuthentication().authenticate(request)


AGENT = built_agent()
FAKE_SMI = Path(__file__).parent / "bin" / "nvidia-smi"


def run_agent(*argv, env=None):
    import os
    import subprocess
    import sys
    return subprocess.run([sys.executable, str(AGENT), *argv], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_report_prints_what_the_heartbeat_would_carry(tmp_path):
    """`--report` needs no server, no token and no writable state dir; it parses the host's smi."""
    import json
    done = run_agent("--report", "--runtime", "process", "--nvidia-smi", str(FAKE_SMI),
                     "--state-dir", str(tmp_path / "never-created"), "--hostname", "gpu-host-1",
                     env={"CARDMIX_AGENT_TOKEN": ""})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["vendor"] == "nvidia" and report["runtime"] == "process" and report["health"] == "ok"
    assert report["hostname"] == "gpu-host-1" and report["driver_versions"] == {"nvidia": "550.90.07"}
    assert [(d["index"], d["name"], d["memory_total_mib"]) for d in report["devices"]] == \
        [(i, "NVIDIA H100 80GB HBM3", 81559) for i in range(8)]
    assert "smi_output" not in report and not (tmp_path / "never-created").exists()


def test_report_without_a_working_smi_says_degraded_and_exits_1(tmp_path):
    import json
    done = run_agent("--report", "--vendor", "nvidia", "--nvidia-smi", str(tmp_path / "no-such-smi"),
                     "--state-dir", str(tmp_path))
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["health"] == "degraded" and report["devices"] == []
    assert "command not found" in report["errors"][0]


def test_serving_still_needs_a_server_and_a_node_token(tmp_path):
    no_server = run_agent("--token", "cmxn_x", "--state-dir", str(tmp_path), env={"CARDMIX_SERVER": ""})
    assert no_server.returncode == 2 and "platform URL is required" in no_server.stderr
    no_token = run_agent("--server", "http://127.0.0.1:9", "--state-dir", str(tmp_path),
                         env={"CARDMIX_AGENT_TOKEN": ""})
    assert no_token.returncode == 2 and "node token" in no_token.stderr


def test_nvidia_rows_with_unsupported_fields_keep_the_card():
    # nvidia-smi prints [N/A] / [Not Supported] for sensors a card or a VM does not expose.
    rows = agent_mod.parse_nvidia_query("0, NVIDIA H200, GPU-5d1c, 143771 MiB, 580.159.03, [N/A], [Not Supported]\n")
    assert rows == [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-5d1c", "memory_total_mib": 143771,
                     "driver_version": "580.159.03", "temperature_c": None, "utilization_pct": None}]


def test_docker_container_sees_its_cards_numbered_from_zero(tmp_path):
    """--gpus device=4,5 gives the container two GPUs, 0 and 1: the platform's host indices would hide both."""
    agent = make_agent(tmp_path)
    env = {"CUDA_VISIBLE_DEVICES": "4,5", "NCCL_DEBUG": "WARN"}
    nvidia = agent.runtime.docker_run_argv({"instance_id": "i1", "cards": [4, 5], "image": "pytorch:2.3", "vendor": "nvidia",
                                    "collective": "nccl", "env": env}, tmp_path / "keys")
    assert nvidia[nvidia.index("--gpus") + 1] == '"device=4,5"'
    assert "CUDA_VISIBLE_DEVICES=0,1" in nvidia and "CUDA_VISIBLE_DEVICES=4,5" not in nvidia
    whole = agent.runtime.docker_run_argv({"instance_id": "i3", "cards": list(range(8)), "image": "x", "vendor": "nvidia",
                                   "collective": "nccl", "env": {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}},
                                  tmp_path / "keys")
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in whole


def test_ascend_container_sees_its_npus_as_logical_devices_from_zero(tmp_path):
    """CANN's ASCEND_RT_VISIBLE_DEVICES takes logical ids; in a container with /dev/davinci4,5 those are 0 and 1."""
    agent = make_agent(tmp_path)
    env = {"ASCEND_RT_VISIBLE_DEVICES": "4,5", "HCCL_CONNECT_TIMEOUT": "600"}
    argv = agent.runtime.docker_run_argv({"instance_id": "i2", "cards": [4, 5], "image": "mindspore:2.3", "vendor": "huawei",
                                  "collective": "hccl", "env": env}, tmp_path / "keys")
    devices = [argv[i + 1] for i, a in enumerate(argv) if a == "--device"]
    assert devices[:2] == ["/dev/davinci4", "/dev/davinci5"]
    assert "ASCEND_RT_VISIBLE_DEVICES=0,1" in argv and "ASCEND_RT_VISIBLE_DEVICES=4,5" not in argv
    assert "HCCL_CONNECT_TIMEOUT=600" in argv and "--gpus" not in argv


def test_docker_container_gets_its_cpu_and_memory_share(tmp_path):
    """Two containers on one shared node: --cpus and --memory in proportion to their cards (the platform's
    `limits`), no swap beyond it; a payload without limits (an older platform, a node of unknown size) adds none."""
    agent = make_agent(tmp_path)
    base = {"image": "pytorch:2.3", "vendor": "nvidia", "collective": "nccl", "env": {}, "ssh_port": 30000}

    def limits(argv):
        return {flag: argv[argv.index(flag) + 1] for flag in ("--cpus", "--memory", "--memory-swap") if flag in argv}

    two = agent.runtime.docker_run_argv({**base, "instance_id": "a", "name": "cardmix-a-0", "cards": [0, 1],
                                 "limits": {"millicpus": 56_000, "memory_mib": 524_288}}, tmp_path / "keys")
    six = agent.runtime.docker_run_argv({**base, "instance_id": "b", "name": "cardmix-b-2", "cards": [2, 3, 4, 5, 6, 7],
                                 "limits": {"millicpus": 168_000, "memory_mib": 1_572_864}}, tmp_path / "keys")
    odd = agent.runtime.docker_run_argv({**base, "instance_id": "c", "name": "cardmix-c-0", "cards": [0],
                                 "limits": {"millicpus": 13_500, "memory_mib": 7}}, tmp_path / "keys")
    assert limits(two) == {"--cpus": "56", "--memory": "524288m", "--memory-swap": "524288m"}
    assert limits(six) == {"--cpus": "168", "--memory": "1572864m", "--memory-swap": "1572864m"}
    assert limits(odd) == {"--cpus": "13.5", "--memory": "7m", "--memory-swap": "7m"}
    assert two.index("--cpus") < two.index("pytorch:2.3")  # an option of docker run, not of the image
    none = agent.runtime.docker_run_argv({**base, "instance_id": "d", "name": "cardmix-d-0", "cards": [0]}, tmp_path / "k")
    bad = agent.runtime.docker_run_argv({**base, "instance_id": "e", "name": "cardmix-e-0", "cards": [0],
                                 "limits": {"millicpus": "all", "memory_mib": -1}}, tmp_path / "k")
    assert limits(none) == {} and limits(bad) == {}


def test_report_carries_the_hosts_cpus_and_memory(tmp_path):
    import json
    import os

    done = run_agent("--report", "--runtime", "process", "--nvidia-smi", str(FAKE_SMI),
                     "--state-dir", str(tmp_path / "s"), env={"CARDMIX_AGENT_TOKEN": ""})
    report = json.loads(done.stdout)
    total_kib = int(next(ln for ln in open("/proc/meminfo") if ln.startswith("MemTotal:")).split()[1])
    assert report["cpus"] == os.cpu_count() and report["memory_mib"] == total_kib // 1024


def test_process_runtime_writes_its_cgroup_v2_limits(tmp_path):
    """The cgroup v2 path of the process runtime's limits, against a directory laid out as a cgroup v2 mount
    (this test host has no writable cgroup v2 cpu/memory controllers; the live test reads back whichever path the
    host allows): cpu.max as quota/period, memory.max in bytes, the pid in cgroup.procs, both levels' controllers
    enabled. Without cpu and memory among the controllers it falls back to rlimits."""
    import subprocess
    import sys

    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    agent = make_agent(tmp_path / "state")
    agent.args.cgroup_root = str(root)
    where = tmp_path / "state" / "instances" / "cardmix-i1-0"
    where.mkdir(parents=True)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        said, limits = agent_mod.ProcessRuntime(agent).process_limits(child.pid, where, {"limits": {"millicpus": 13_500, "memory_mib": 2048}})
        group = root / "cardmix" / "cardmix-i1-0"
        assert limits == {"by": "cgroup", "cgroup": str(group), "millicpus": 13_500, "memory_mib": 2048}, said
        assert (group / "cpu.max").read_text() == "1350000 100000"
        assert (group / "memory.max").read_text() == str(2048 * 1024 * 1024)
        assert (group / "cgroup.procs").read_text() == str(child.pid)
        assert (root / "cgroup.subtree_control").read_text() == "+cpu +memory"
        assert (root / "cardmix" / "cgroup.subtree_control").read_text() == "+cpu +memory"
        assert (where / "cgroup").read_text() == str(group)
        (root / "cgroup.controllers").write_text("cpuset io pids\n")
        said, limits = agent_mod.ProcessRuntime(agent).process_limits(child.pid, tmp_path, {"limits": {"millicpus": 1000, "memory_mib": 4096}})
        assert limits["by"] == "rlimit" and "no writable cgroup v2" in said
    finally:
        child.kill()
        child.wait()
    assert agent_mod.ProcessRuntime(agent).process_limits(1, where, {}) == ("", {})  # nothing asked: nothing applied
