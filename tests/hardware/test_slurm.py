"""Slurm hybrid partitions against a real slurmctld (with munged) started in a temporary directory."""
import re
import subprocess
import uuid
from types import SimpleNamespace

import pytest
from django.core.management import call_command

from hardware import slurm
from tests.factories.inventory import NodeFactory, ZoneFactory, accelerator

ACCOUNT = "cm-0123456789ab"


def show_partition(cluster, name) -> subprocess.CompletedProcess:
    return subprocess.run([cluster["scontrol"], "show", "partition", name], env=cluster["env"],
                          capture_output=True, text=True)


@pytest.mark.slurm
def test_hybrid_partition_created_and_deleted_on_real_slurmctld(slurm_cluster, settings, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster["conf"]))
    settings.SLURM_SCONTROL = slurm_cluster["scontrol"]
    instance_id = uuid.uuid4()
    name = slurm.partition_name(instance_id)
    assert name == f"hybrid-{instance_id.hex[:8]}"

    created = slurm.partition_create(instance_id=instance_id, hostnames=["npu-a01.zone-a", "gpu-a01.zone-a"],
                                     account=ACCOUNT)
    assert created.ok, created.output
    shown = show_partition(slurm_cluster, name)
    assert shown.returncode == 0, shown.stderr
    assert f"PartitionName={name}" in shown.stdout
    assert "Nodes=gpu-a01,npu-a01" in shown.stdout
    assert f"AllowAccounts={ACCOUNT} " in shown.stdout
    assert "State=UP" in shown.stdout

    again = slurm.partition_create(instance_id=instance_id, hostnames=["npu-a01", "gpu-a01", "gpu-a02"],
                                   account=ACCOUNT)
    assert again.ok, again.output  # a retried step updates instead of failing
    assert "gpu-a[01-02]" in show_partition(slurm_cluster, name).stdout or \
        "gpu-a01,gpu-a02" in show_partition(slurm_cluster, name).stdout

    deleted = slurm.partition_delete(instance_id=instance_id)
    assert deleted.ok, deleted.output
    gone = show_partition(slurm_cluster, name)
    assert gone.returncode != 0 and "not found" in (gone.stdout + gone.stderr).lower()
    assert slurm.partition_delete(instance_id=instance_id).ok  # deleting again is done, not an error


@pytest.mark.slurm
def test_unknown_node_is_reported_not_raised(slurm_cluster, settings, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster["conf"]))
    settings.SLURM_SCONTROL = slurm_cluster["scontrol"]
    result = slurm.partition_create(instance_id=uuid.uuid4(), hostnames=["no-such-node"], account=ACCOUNT)
    assert not result.ok
    assert "no-such-node" in result.output or "invalid" in result.output.lower()


def test_scontrol_missing_or_disabled(settings):
    settings.SLURM_SCONTROL = "/nonexistent/scontrol"
    result = slurm.partition_delete(instance_id=uuid.uuid4())
    assert result.exit_code == 127 and "not found" in result.output
    settings.SLURM_SCONTROL = ""
    assert slurm.slurm_partition(instance_id=uuid.uuid4(), account=ACCOUNT, nodes=[object()]) is None


@pytest.mark.django_db
def test_sbatch_header_and_slurm_partition_for_a_hybrid(settings):
    settings.SLURM_SCONTROL = "scontrol"
    zone = ZoneFactory()
    npu = NodeFactory(hostname="npu-a01.test", zone=zone, accelerator=accelerator("ascend-910b"))
    gpu = NodeFactory(hostname="gpu-a01.test", zone=zone, accelerator=accelerator("h800-sxm-80g"))
    instance_id = uuid.uuid4()
    info = slurm.slurm_partition(instance_id=instance_id, account=ACCOUNT, nodes=[gpu, npu])
    assert info["name"] == slurm.partition_name(instance_id) and info["account"] == ACCOUNT
    assert info["nodes"] == ["gpu-a01", "npu-a01"]
    header = info["sbatch_header"].splitlines()
    assert header[0] == "#!/bin/bash"
    npu_line = f"#SBATCH --partition={info['name']} --account={ACCOUNT} --nodes=1 --gres=npu:8 --ntasks-per-node=8"
    gpu_line = f"#SBATCH --partition={info['name']} --account={ACCOUNT} --nodes=1 --gpus-per-node=8 --ntasks-per-node=8"
    assert header[2:] == [npu_line, "#SBATCH hetjob", gpu_line]


def test_account_name_is_stable_and_valid():
    org_id = uuid.UUID("5C0FFEE0-1234-4ABC-8DEF-000000000001")
    assert slurm.account_name(org_id) == slurm.account_name(str(org_id)) == "cm-5c0ffee01234"
    assert re.fullmatch(r"[a-z0-9-]+", slurm.account_name(uuid.uuid4()))
    assert slurm.account_name(uuid.uuid4()) != slurm.account_name(uuid.uuid4())


def test_shared_nodes_only_for_containers_not_taking_every_card():
    whole = [("gpu-a01", 8, 8), ("npu-a01", 4, 8), ("npu-a01", 4, 8)]  # two groups make the NPU node whole
    assert slurm.shared_nodes(kind="container", parts=whole) == []
    assert slurm.shared_nodes(kind="container", parts=[("gpu-a01", 8, 8), ("npu-a01", 4, 8)]) == ["npu-a01"]
    assert slurm.shared_nodes(kind="bare_metal", parts=[("npu-a01", 4, 8)]) == []


@pytest.mark.slurm
def test_the_header_submits_to_the_partition_under_the_account(slurm_cluster, settings, monkeypatch, tmp_path):
    """The header the API shows is one sbatch takes: both heterogeneous components land in the partition under
    the organization's account. slurmctld checks AllowAccounts on the jobs it is given — one under another account
    is held with the reason naming the allowed one. (Without slurmdbd it cannot tie any job to an account, so the
    controller holds ours too, "account not known": docs/operations/hardware.md says an operator needs slurmdbd.)"""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster["conf"]))
    settings.SLURM_SCONTROL = slurm_cluster["scontrol"]
    gpu = SimpleNamespace(hostname="gpu-a02.test", card_count=8, accelerator=SimpleNamespace(vendor="nvidia"))
    npu = SimpleNamespace(hostname="npu-a02.test", card_count=8, accelerator=SimpleNamespace(vendor="huawei"))
    instance_id = uuid.uuid4()
    info = slurm.slurm_partition(instance_id=instance_id, account=ACCOUNT, nodes=[gpu, npu])
    assert slurm.partition_create(instance_id=instance_id, hostnames=["gpu-a02", "npu-a02"], account=ACCOUNT).ok
    script = tmp_path / "job.sh"
    script.write_text(info["sbatch_header"] + "hostname\n")
    env = slurm_cluster["env"]
    ours = subprocess.run(["sbatch", "--hold", "--parsable", str(script)], env=env, capture_output=True, text=True)
    assert ours.returncode == 0, ours.stderr
    job = ours.stdout.strip().split(";")[0]
    queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%P|%a|%D"], env=env, capture_output=True, text=True)
    assert sorted(queued.stdout.split()) == sorted([f"{info['name']}|{ACCOUNT}|1"] * 2), queued.stdout
    theirs = subprocess.run(["sbatch", "--hold", "--parsable", "--account=cm-someoneelse", "-p", info["name"],
                             "--nodes=1", "--wrap=hostname"], env=env, capture_output=True, text=True)
    assert theirs.returncode == 0, theirs.stderr
    held = subprocess.run(["squeue", "-h", "-j", theirs.stdout.strip(), "-o", "%a|%r"], env=env,
                          capture_output=True, text=True).stdout.strip()
    assert held.startswith("cm-someoneelse|") and f"{info['name']} allows {ACCOUNT}" in held, held
    subprocess.run(["scancel", job, theirs.stdout.strip()], env=env)


@pytest.mark.django_db
def test_slurm_nodes_conf_command(capsys):
    zone = ZoneFactory(slug="zone-x")
    NodeFactory(hostname="gpu-b01.test", zone=zone, accelerator=accelerator("h100-sxm-80g"))
    NodeFactory(hostname="npu-b01.test", zone=zone, accelerator=accelerator("ascend-910b"), card_count=8)
    NodeFactory(hostname="gpu-b02.test", zone=zone, state="retired")
    call_command("slurm_nodes_conf", "--zone", "zone-x")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "GresTypes=gpu,npu"
    assert ("NodeName=gpu-b01 NodeHostname=gpu-b01.test Gres=gpu:8 Feature=h100-sxm-80g,zone-x State=UNKNOWN"
            in lines)
    assert any(line.startswith("NodeName=npu-b01 ") and "Gres=npu:8" in line for line in lines)
    assert not any("gpu-b02" in line for line in lines)


@pytest.mark.slurm
def test_the_account_is_made_sure_of_first_and_its_failure_stops_the_create(slurm_cluster, settings, monkeypatch):
    """SLURM_SACCTMGR set: sacctmgr adds the account before the partition is made. This controller has no slurmdbd,
    so the real sacctmgr refuses, and no partition is made that no job could use."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster["conf"]))
    settings.SLURM_SCONTROL = slurm_cluster["scontrol"]
    settings.SLURM_SACCTMGR = "sacctmgr"
    instance_id = uuid.uuid4()
    result = slurm.partition_create(instance_id=instance_id, hostnames=["gpu-a01", "npu-a01"], account=ACCOUNT)
    assert not result.ok and result.argv[:5] == ["sacctmgr", "-i", "add", "account", ACCOUNT]
    assert "slurmdbd" in result.output
    assert show_partition(slurm_cluster, slurm.partition_name(instance_id)).returncode != 0
