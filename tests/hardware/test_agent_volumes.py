"""The agent's side of volumes, on the built .pyz: directories on the zone's storage root bind-mounted into containers
(the fake docker CLI records the exact argv), exposed to the process runtime and bare-metal tenants, sizes set as
project quotas (the fake xfs_quota / setquota / chattr record theirs), usage in the heartbeat, grow with nothing
detached, and a wipe that never touches the storage root."""
import json
import os

import pytest

from .conftest import BIN, agent_package, wait_for

agent_mod = agent_package()
volumes_mod = agent_package("volumes")

IID = "5a1e0000-0000-4000-8000-0000000000a1"
VID = "0b7d5a3c-1111-4222-8333-444455556666"
GIB = 1024 ** 3


def make_agent(tmp_path, *extra, runtime="docker"):
    args = agent_mod.parse_args([
        "--server", "http://127.0.0.1:9", "--token", "cmxn_test", "--vendor", "nvidia",
        "--nvidia-smi", str(BIN / "nvidia-smi"), "--state-dir", str(tmp_path / "state"), "--runtime", runtime,
        "--docker", str(BIN / "docker"), "--ip", str(BIN / "ip"), "--bridge", str(BIN / "bridge"),
        "--rdma-dir", str(tmp_path / "no-rdma"), "--storage-root", str(tmp_path / "root"),
        "--xfs-quota", str(BIN / "xfs_quota"), "--setquota", str(BIN / "setquota"), "--chattr", str(BIN / "chattr"),
        "--usage-interval", "0", *extra])
    return agent_mod.Agent(args)


def payload(tmp_path, *volumes, kind="container", cards=(0, 1)):
    body = {"instance_id": IID, "kind": kind, "cards": list(cards) if kind == "container" else [],
            "image": "pytorch:2.3", "ssh_keys": ["ssh-ed25519 AAAA t@x"], "env": {}, "vendor": "nvidia",
            "collective": "nccl", "storage_root": str(tmp_path / "root"), "volumes": list(volumes)}
    if kind == "container":
        body.update(name=f"cardmix-{IID}-{min(cards)}", ssh_port=30000)
    return body


def disk(size_gib=10, mount="/data", vid=VID):
    return {"id": vid, "kind": "disk", "dir": f"volumes/{vid}", "mount_path": mount, "read_only": False,
            "size_bytes": size_gib * GIB}


def dataset(slug="imagenet-1k"):
    return {"id": slug, "kind": "dataset", "dir": f"datasets/{slug}", "mount_path": f"/datasets/{slug}",
            "read_only": True}


def runs(docker):
    return [c for c in docker.calls() if c[:1] == ["run"]]


def test_docker_bind_mounts_volumes_and_datasets_read_only(tmp_path, docker):
    (tmp_path / "root" / "datasets" / "imagenet-1k").mkdir(parents=True)
    agent = make_agent(tmp_path, "--storage-quota", "none")
    text, code, meta = agent.do_prepare(payload(tmp_path, disk(), dataset()))
    assert code == 0, text
    assert (tmp_path / "root" / "volumes" / VID).is_dir()
    [argv] = runs(docker)
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "--mount"]
    assert mounts == [f"type=bind,source={tmp_path}/root/volumes/{VID},target=/data",
                      f"type=bind,source={tmp_path}/root/datasets/imagenet-1k,target=/datasets/imagenet-1k,readonly"]
    assert meta["volumes"] == [VID, "imagenet-1k"]
    assert "no quota on this filesystem" in text and "dataset imagenet-1k at /datasets/imagenet-1k (read-only)" in text


@pytest.mark.parametrize("entry, said", [
    ({**disk(), "mount_path": "/etc"}, "would cover a system directory"),
    ({**disk(), "mount_path": "/root/.ssh"}, "would cover a system directory"),
    ({**disk(), "mount_path": "data"}, "must be an absolute path"),
    ({**disk(), "mount_path": "/mnt/a,readonly=false"}, "without commas"),
    ({**disk(), "dir": "volumes/../../etc"}, "is not volumes/<id> or datasets/<slug>"),
    ({**disk(), "dir": "/etc/passwd"}, "is not volumes/<id> or datasets/<slug>"),
    (dataset("not-copied-here"), "has no copy at"),
])
def test_a_volume_the_agent_will_not_mount_refuses_the_prepare(tmp_path, docker, entry, said):
    (tmp_path / "root").mkdir()
    text, code, _ = make_agent(tmp_path).do_prepare(payload(tmp_path, entry))
    assert code == 78 and said in text, text
    assert runs(docker) == []  # docker never started anything


def test_a_storage_root_not_mounted_refuses_the_prepare(tmp_path, docker):
    text, code, _ = make_agent(tmp_path).do_prepare(payload(tmp_path, disk()))
    assert code == 78 and "is not mounted on this node" in text
    assert runs(docker) == []


def test_xfs_project_quota_set_at_prepare_and_raised_by_grow(tmp_path, docker):
    agent = make_agent(tmp_path, "--storage-quota", "xfs")
    (tmp_path / "root").mkdir()
    text, code, _ = agent.do_prepare(payload(tmp_path, disk(size_gib=10)))
    assert code == 0, text
    proj = volumes_mod.project_id(VID)
    source = f"{tmp_path}/root/volumes/{VID}"
    quota = [c for c in docker.calls() if c[0] == "xfs_quota"]
    # The mount point is /proc/mounts' (whatever holds tmp_path here).
    point = volumes_mod.fs_of(tmp_path / "root", open("/proc/mounts").read())[1]
    assert quota == [["xfs_quota", "-x", "-c", f"project -s -p {source} {proj}", point],
                     ["xfs_quota", "-x", "-c", f"limit -p bhard={10 * GIB} {proj}", point]]
    [before] = agent.volumes_report()
    assert before["size_bytes"] == 10 * GIB and before["quota"] == "xfs"

    text, code, meta = agent.do_volume_grow({"volume_id": VID, "dir": f"volumes/{VID}", "size_bytes": 25 * GIB,
                                             "storage_root": str(tmp_path / "root")})
    assert code == 0 and meta == {"quota": "xfs", "size_bytes": 25 * GIB, "mounts": 1}, text
    assert [c for c in docker.calls() if c[0] == "xfs_quota"][-1] == [
        "xfs_quota", "-x", "-c", f"limit -p bhard={25 * GIB} {proj}", point]
    assert agent.volumes_report()[0]["size_bytes"] == 25 * GIB
    assert len(runs(docker)) == 1  # the container was not restarted
    assert not [c for c in docker.calls() if c[:2] == ["rm", "-f"] and c[-1] == f"cardmix-{IID}-0"][1:]


def test_ext4_project_quota(tmp_path, docker):
    agent = make_agent(tmp_path, "--storage-quota", "ext4")
    (tmp_path / "root").mkdir()
    text, code, _ = agent.do_prepare(payload(tmp_path, disk(size_gib=1)))
    assert code == 0, text
    proj = str(volumes_mod.project_id(VID))
    calls = [c for c in docker.calls() if c[0] in ("chattr", "setquota")]
    assert calls[0] == ["chattr", "-R", "+P", "-p", proj, f"{tmp_path}/root/volumes/{VID}"]
    assert calls[1][:6] == ["setquota", "-P", proj, "0", str(GIB // 1024), "0"]


def test_project_ids_are_stable_and_never_zero():
    assert volumes_mod.project_id(VID) == volumes_mod.project_id(VID) > 0
    assert volumes_mod.project_id(VID) != volumes_mod.project_id(VID.replace("6", "7"))


def test_heartbeat_reports_usage_and_flags_a_volume_over_its_size_without_a_quota(tmp_path, docker):
    agent = make_agent(tmp_path, "--storage-quota", "none")
    (tmp_path / "root").mkdir()
    small = {**disk(), "size_bytes": 64 * 1024}
    assert agent.do_prepare(payload(tmp_path, small))[1] == 0
    [entry] = agent.report()["volumes"]
    assert entry == {"id": VID, "used_bytes": entry["used_bytes"], "size_bytes": 64 * 1024, "quota": "none",
                     "over_quota": False}
    (tmp_path / "root" / "volumes" / VID / "checkpoint.bin").write_bytes(os.urandom(200 * 1024))
    [entry] = agent.report()["volumes"]
    assert entry["used_bytes"] >= 200 * 1024 and entry["over_quota"] is True


def test_process_runtime_exposes_the_mount_path_and_the_data_outlives_the_instance(tmp_path):
    writer = tmp_path / "writer.py"
    writer.write_text("import json, os, time\n"
                      "mounts = json.loads(os.environ['CARDMIX_MOUNTS'])\n"
                      "open(os.path.join(mounts['/mnt/ckpt'], 'step-1.pt'), 'wb').write(b'\\x00weights\\xff')\n"
                      "time.sleep(3600)\n")
    agent = make_agent(tmp_path, "--storage-quota", "none", "--process-command", f"python3 {writer}",
                       runtime="process")
    (tmp_path / "root").mkdir()
    shared = {**disk(mount="/mnt/ckpt"), "kind": "shared"}
    text, code, meta = agent.do_prepare(payload(tmp_path, shared))
    assert code == 0, text
    where = agent.instance_dir(f"cardmix-{IID}-0")
    link = where / "mounts" / "mnt" / "ckpt"
    assert link.is_symlink() and os.readlink(link) == f"{tmp_path}/root/volumes/{VID}"
    written = tmp_path / "root" / "volumes" / VID / "step-1.pt"
    wait_for(written.exists, timeout=10, what="the instance's process to write its checkpoint")
    wait_for(lambda: written.read_bytes() == b"\x00weights\xff", timeout=5, what="the whole file")
    text, code, _ = agent.do_release({"instance_id": IID, "cards": [0, 1], "name": f"cardmix-{IID}-0"})
    assert code == 0 and not where.exists(), text
    assert written.read_bytes() == b"\x00weights\xff"  # the state dir went; the volume did not


def test_bare_metal_links_at_the_mount_path_and_wipe_leaves_the_storage_root(tmp_path, docker):
    agent = make_agent(tmp_path, "--storage-quota", "none", "--authorized-keys", str(tmp_path / "ak"))
    (tmp_path / "root").mkdir()
    mount = tmp_path / "host" / "data"
    text, code, meta = agent.do_prepare(payload(tmp_path, disk(mount=str(mount)), kind="bare_metal"))
    assert code == 0, text
    assert mount.is_symlink() and os.readlink(mount) == f"{tmp_path}/root/volumes/{VID}"
    (mount / "model.safetensors").write_bytes(b"kept")
    text, code, _ = agent.do_wipe({"collective": "nccl"})  # an instance never released, then cleaning
    assert "1 volume link(s) removed (their data stays on the storage root)" in text
    assert not mount.is_symlink() and not mount.exists()
    assert (tmp_path / "root" / "volumes" / VID / "model.safetensors").read_bytes() == b"kept"


def test_bare_metal_never_mounts_over_a_real_directory(tmp_path, docker):
    agent = make_agent(tmp_path, "--storage-quota", "none", "--authorized-keys", str(tmp_path / "ak"))
    (tmp_path / "root").mkdir()
    mount = tmp_path / "host" / "data"
    mount.mkdir(parents=True)
    (mount / "host-file").write_text("the host's")
    text, code, _ = agent.do_prepare(payload(tmp_path, disk(mount=str(mount)), kind="bare_metal"))
    assert code == 78 and "exists on this host" in text
    assert (mount / "host-file").read_text() == "the host's"


def test_usage_walk_is_rate_limited(tmp_path, docker):
    agent = make_agent(tmp_path, "--storage-quota", "none", "--usage-interval", "3600")
    (tmp_path / "root").mkdir()
    assert agent.do_prepare(payload(tmp_path, disk()))[1] == 0
    first = agent.volumes_report()[0]["used_bytes"]
    (tmp_path / "root" / "volumes" / VID / "big").write_bytes(os.urandom(256 * 1024))
    assert agent.volumes_report()[0]["used_bytes"] == first  # not walked again within the interval
    agent.usage_cache.clear()
    assert agent.volumes_report()[0]["used_bytes"] >= first + 256 * 1024


def test_volumes_json_is_what_the_release_leaves(tmp_path, docker):
    agent = make_agent(tmp_path, "--storage-quota", "none")
    (tmp_path / "root").mkdir()
    agent.do_prepare(payload(tmp_path, disk()))
    recorded = json.loads((agent.instance_dir(f"cardmix-{IID}-0") / "volumes.json").read_text())
    assert recorded["root"] == str(tmp_path / "root") and recorded["volumes"][0]["mount_path"] == "/data"
    agent.do_release({"instance_id": IID, "cards": [0, 1], "name": f"cardmix-{IID}-0"})
    assert agent.volumes_report() == []  # nothing mounted on this node any more
    assert (tmp_path / "root" / "volumes" / VID).is_dir()


def test_volume_delete_removes_its_directory_unless_mounted_here(tmp_path, docker):
    agent = make_agent(tmp_path, "--storage-quota", "none")
    (tmp_path / "root").mkdir()
    assert agent.do_prepare(payload(tmp_path, disk()))[1] == 0
    (tmp_path / "root" / "volumes" / VID / "f").write_text("x")
    body = {"volume_id": VID, "dir": f"volumes/{VID}", "storage_root": str(tmp_path / "root")}
    text, code, _ = agent.do_volume_delete(body)
    assert code == 1 and "still mounted on this node" in text
    agent.do_release({"instance_id": IID, "cards": [0, 1], "name": f"cardmix-{IID}-0"})
    text, code, meta = agent.do_volume_delete(body)
    assert code == 0 and meta == {"removed": True} and not (tmp_path / "root" / "volumes" / VID).exists()
    (tmp_path / "root" / "datasets" / "imagenet-1k").mkdir(parents=True)
    text, code, _ = agent.do_volume_delete({**body, "dir": "datasets/imagenet-1k"})
    assert code == 78 and (tmp_path / "root" / "datasets" / "imagenet-1k").is_dir()


def test_a_storage_root_inside_the_agents_state_is_never_mounted(tmp_path, docker):
    agent = make_agent(tmp_path, "--storage-quota", "none")
    body = {**payload(tmp_path, disk()), "storage_root": str(tmp_path / "state")}  # an operator's mistake
    text, code, _ = agent.do_prepare(body)
    assert code == 78 and "the agent's token or state" in text, text
    assert runs(docker) == []
