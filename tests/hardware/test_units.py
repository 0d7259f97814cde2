"""Pure pieces: the agent's docker command line and device parsing, BMC secrets, the driver registry."""
import importlib.util
from argparse import Namespace
from pathlib import Path

import pytest

from hardware.bmc_secrets import bmc_decrypt, bmc_encrypt
from hardware.selectors import BmcLogin
from provisioning.drivers import driver_names
from tenancy.authentication import BearerTokenAuthentication

SPEC = importlib.util.spec_from_file_location("cardmix_agent", Path(__file__).parents[2] / "agent" / "cardmix_agent.py")
agent_mod = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(agent_mod)


def make_agent(tmp_path):
    args = Namespace(server="http://x", token="cmxn_x", state_dir=str(tmp_path), heartbeat_interval=1.0,
                     vendor="nvidia", ca_file="", docker="docker", shm_size="64g")
    return agent_mod.Agent(args)


def test_docker_argv_nvidia_and_ascend(tmp_path):
    agent = make_agent(tmp_path)
    nvidia = agent.docker_run_argv({"instance_id": "i1", "cards": [0, 1], "image": "pytorch:2.3", "vendor": "nvidia",
                                    "collective": "nccl", "env": {"NCCL_DEBUG": "WARN"}}, tmp_path / "keys")
    assert nvidia[nvidia.index("--gpus") + 1] == '"device=0,1"'
    assert nvidia[-1] == "pytorch:2.3" and "NCCL_DEBUG=WARN" in nvidia
    assert f"{tmp_path / 'keys'}:/root/.ssh/authorized_keys:ro" in nvidia
    ascend = agent.docker_run_argv({"instance_id": "i2", "cards": [2, 5], "image": "cann", "vendor": "huawei",
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
