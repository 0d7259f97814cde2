"""The agent keeps its token and state out of tenants' reach on a container node: the token file is 0600 and
its own (root's under systemd), the state dir 0700, and no container it starts mounts either (asserted on the
docker command line the runtime really ran, through the fake docker CLI tests/hardware/bin/docker)."""
import json
import os
import stat
from pathlib import Path

import pytest

from .conftest import BIN, agent_package

agent_mod = agent_package()

PAYLOAD = {"kind": "container", "instance_id": "inst-1", "name": "cardmix-inst-1-0", "cards": [0, 1],
           "image": "pytorch:2.3", "vendor": "nvidia", "collective": "nccl", "ssh_port": 30000,
           "ssh_keys": ["ssh-ed25519 AAAAC3Nza tenant@x"], "env": {"CUDA_VISIBLE_DEVICES": "0,1"}}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """/etc/cardmix-agent/token and /var/lib/cardmix-agent, as on a node, under tmp_path; the fake docker."""
    etc = tmp_path / "etc" / "cardmix-agent"
    etc.mkdir(parents=True)
    token = etc / "token"
    token.write_text("cmxn_test-token\n")
    token.chmod(0o644)  # as a careless `echo > token` leaves it
    state = tmp_path / "var" / "lib" / "cardmix-agent"
    state.mkdir(parents=True, mode=0o755)
    state.chmod(0o755)
    docker_state = tmp_path / "docker" / "containers.json"
    docker_state.parent.mkdir()
    monkeypatch.setenv("CARDMIX_FAKE_DOCKER_STATE", str(docker_state))
    return {"token": token, "etc": etc, "state": state, "calls": docker_state.parent / "calls.log"}


def docker_agent(layout, *extra):
    args = agent_mod.parse_args(["--server", "http://127.0.0.1:9", "--token-file", str(layout["token"]),
                                 "--runtime", "docker", "--docker", str(BIN / "docker"), "--vendor", "nvidia",
                                 "--state-dir", str(layout["state"]), "--kernel-cmdline", "/nonexistent", *extra])
    return agent_mod.Agent(args)


def docker_runs(layout) -> list[list[str]]:
    lines = layout["calls"].read_text().splitlines() if layout["calls"].exists() else []
    return [argv for argv in map(json.loads, lines) if argv[:1] == ["run"]]


def bind_sources(argv: list[str]) -> list[str]:
    return [argv[i + 1].split(":", 1)[0] for i, a in enumerate(argv[:-1]) if a in ("-v", "--volume")]


def test_token_file_is_tightened_to_0600_and_state_dir_to_0700(layout):
    agent = docker_agent(layout)
    assert mode(layout["token"]) == 0o600
    assert layout["token"].stat().st_uid == os.geteuid() == 0  # root's, as under systemd
    assert mode(layout["state"]) == 0o700
    assert agent.token == "cmxn_test-token"


def test_a_token_file_owned_by_someone_else_is_refused(layout, capsys):
    os.chown(layout["token"], 4242, 4242)  # a tenant-writable owner could swap the token
    with pytest.raises(SystemExit) as exc:
        docker_agent(layout)
    assert exc.value.code == 2
    assert "owned by uid 4242" in capsys.readouterr().err


def test_the_docker_runtime_never_mounts_the_token_or_the_state_dir(layout):
    agent = docker_agent(layout)
    text, code, meta = agent.do_prepare(PAYLOAD)
    assert code == 0, text
    [argv] = docker_runs(layout)
    sources = [Path(s).resolve() for s in bind_sources(argv)]
    keys = (layout["state"] / "instances" / "cardmix-inst-1-0" / "authorized_keys").resolve()
    assert sources == [keys]  # the tenant's own keys file, read-only, and nothing else of the agent's
    assert f"{keys}:/root/.ssh/authorized_keys:ro" in argv
    for protected in (layout["token"], layout["etc"], layout["state"]):
        assert not any(s == protected.resolve() or protected.resolve().is_relative_to(s) for s in sources)
        assert not any(str(protected) in a and not a.startswith(str(keys)) for a in argv), argv
    assert "--privileged" not in argv and "--volumes-from" not in argv


@pytest.mark.parametrize("mount", ["-v {state}:/state", "-v {etc}:/etc/agent:ro", "-v {token}:/t:ro",
                                   "-v /:/host", "-v /etc/cardmix-agent:/x", "-v /etc:/host-etc:ro", "-v {state_parent}:/varlib", "--mount type=bind,source={state}/journal,target=/j",
                                   "-v {state}/instances/cardmix-inst-1-0:/data",
                                   "-v {state}/instances/cardmix-inst-1-0/network.json:/n:ro"])
def test_a_prepare_that_would_mount_them_is_refused_before_docker_runs(layout, monkeypatch, mount):
    agent = docker_agent(layout)
    built = agent.runtime.docker_run_argv
    extra = mount.format(state=layout["state"], etc=layout["etc"], token=layout["token"],
                         state_parent=layout["state"].parent).split(" ")
    # A future change to the command line that would expose them (e.g. a data mount gone wrong).
    monkeypatch.setattr(agent.runtime, "docker_run_argv", lambda payload, keys, mounts=(): built(
        payload, keys, mounts)[:-1] + extra + built(payload, keys, mounts)[-1:])
    text, code, meta = agent.do_prepare(PAYLOAD)
    assert code == agent_mod.EXIT_CONFIG and "refusing to start cardmix-inst-1-0" in text, text
    assert docker_runs(layout) == []  # docker run never called
    assert meta["ssh_port"] is None


def test_an_unrelated_host_mount_is_allowed(layout, monkeypatch):
    agent = docker_agent(layout)
    argv = agent.runtime.docker_run_argv(PAYLOAD, layout["state"] / "instances" / "x" / "authorized_keys")
    assert agent.runtime.exposed_mounts(argv[:-1] + ["-v", "/usr/local/Ascend/driver:/usr/local/Ascend/driver:ro",
                                             "-v", "scratch:/scratch", argv[-1]]) == []
