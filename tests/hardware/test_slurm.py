"""Slurm hybrid partitions against a real slurmctld (with munged) started in a temporary directory."""
import subprocess
import uuid

import pytest
from django.core.management import call_command

from hardware import slurm
from tests.factories.inventory import NodeFactory, ZoneFactory, accelerator


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

    created = slurm.partition_create(instance_id=instance_id, hostnames=["npu-a01.zone-a", "gpu-a01.zone-a"])
    assert created.ok, created.output
    shown = show_partition(slurm_cluster, name)
    assert shown.returncode == 0, shown.stderr
    assert f"PartitionName={name}" in shown.stdout
    assert "Nodes=gpu-a01,npu-a01" in shown.stdout
    assert "State=UP" in shown.stdout

    again = slurm.partition_create(instance_id=instance_id, hostnames=["npu-a01", "gpu-a01", "gpu-a02"])
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
    result = slurm.partition_create(instance_id=uuid.uuid4(), hostnames=["no-such-node"])
    assert not result.ok
    assert "no-such-node" in result.output or "invalid" in result.output.lower()


def test_scontrol_missing_or_disabled(settings):
    settings.SLURM_SCONTROL = "/nonexistent/scontrol"
    result = slurm.partition_delete(instance_id=uuid.uuid4())
    assert result.exit_code == 127 and "not found" in result.output
    settings.SLURM_SCONTROL = ""
    assert slurm.slurm_partition(instance_id=uuid.uuid4(), nodes=[object()]) is None


@pytest.mark.django_db
def test_sbatch_header_and_slurm_partition_for_a_hybrid(settings):
    settings.SLURM_SCONTROL = "scontrol"
    zone = ZoneFactory()
    npu = NodeFactory(hostname="npu-a01.test", zone=zone, accelerator=accelerator("ascend-910b"))
    gpu = NodeFactory(hostname="gpu-a01.test", zone=zone, accelerator=accelerator("h800-sxm-80g"))
    instance_id = uuid.uuid4()
    info = slurm.slurm_partition(instance_id=instance_id, nodes=[gpu, npu])
    assert info["name"] == slurm.partition_name(instance_id)
    assert info["nodes"] == ["gpu-a01", "npu-a01"]
    header = info["sbatch_header"].splitlines()
    assert header[0] == "#!/bin/bash"
    assert f"#SBATCH --partition={info['name']}" in header
    assert "#SBATCH --gres=npu:8" in header and "#SBATCH --gres=gpu:8" in header
    assert header.index("#SBATCH hetjob") > header.index("#SBATCH --gres=npu:8")


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
