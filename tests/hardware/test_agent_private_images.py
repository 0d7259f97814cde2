"""The agent's docker runtime with private images, through the fake docker CLI (tests/hardware/bin/docker) whose
`pull` and `push` are real registry clients, against a real registry on loopback: the organization's login is
presented to the registry, never in an argv, the output or the agent's log, and its DOCKER_CONFIG is gone after the
pull; a wrong login fails the prepare before `docker run`; "Save as image" commits and pushes with the operator's
login, so the registry really holds the image, and the node keeps no copy."""
import hashlib
import json
import logging
import os

import pytest

from tests.registry_server import AVAILABLE, PASSWORD, USER, RegistryServer

from .conftest import BIN, agent_package

agent_mod = agent_package()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason="needs docker-registry and apache2-utils")


@pytest.fixture
def registry(tmp_path):
    server = RegistryServer(tmp_path / "registry")
    yield server
    server.stop()


@pytest.fixture
def node(tmp_path, monkeypatch):
    state = tmp_path / "state"
    docker_state = tmp_path / "docker" / "containers.json"
    docker_state.parent.mkdir()
    monkeypatch.setenv("CARDMIX_FAKE_DOCKER_STATE", str(docker_state))
    token = tmp_path / "token"
    token.write_text("cmxn_test\n")
    args = agent_mod.parse_args(["--server", "http://127.0.0.1:9", "--token-file", str(token), "--runtime", "docker",
                                 "--docker", str(BIN / "docker"), "--vendor", "nvidia", "--state-dir", str(state),
                                 "--kernel-cmdline", "/nonexistent"])
    agent = agent_mod.Agent(args)

    def log(name):
        path = docker_state.parent / name
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return agent, state, log, docker_state.parent


def payload(image, auth):
    return {"kind": "container", "instance_id": "inst-1", "name": "cardmix-inst-1-0", "cards": [0], "image": image,
            "vendor": "nvidia", "collective": "nccl", "ssh_port": 30000, "ssh_keys": ["ssh-ed25519 AAAA t@x"],
            "env": {}, **({"registry_auth": auth} if auth else {})}


def test_a_private_image_is_pulled_with_its_login_which_leaves_nothing_behind(registry, node, caplog):
    agent, state, log, docker_dir = node
    digest, _ = registry.push("team/trainer", "1.0")
    image = f"{registry.host}/team/trainer:1.0@{digest}"
    caplog.set_level(logging.DEBUG)
    text, code, meta = agent.do_prepare(payload(image, {"registry": registry.host, "username": USER,
                                                        "password": PASSWORD}))
    assert code == 0, text
    assert f"pulled {image}" in text and meta["container"] == "cardmix-inst-1-0"
    [pull] = log("pulls.log")
    assert pull["image"] == image and pull["user"] == USER
    assert pull["password_sha256"] == hashlib.sha256(PASSWORD.encode()).hexdigest()
    assert pull["docker_config"].startswith(str(state)) and not os.path.exists(pull["docker_config"])
    assert not list(state.glob("docker-login-*"))  # nothing left in the state dir
    calls = log("calls.log")
    assert [c[0] for c in calls if c[0] in ("pull", "run")] == ["pull", "run"]  # pulled, then run
    assert PASSWORD not in (docker_dir / "calls.log").read_text()  # never in an argv
    assert PASSWORD not in text and PASSWORD not in caplog.text


def test_a_wrong_login_fails_the_prepare_before_docker_run(registry, node):
    agent, state, log, _ = node
    registry.push("team/trainer", "1.0")
    text, code, _ = agent.do_prepare(payload(f"{registry.host}/team/trainer:1.0",
                                             {"registry": registry.host, "username": USER, "password": "wrong-pass"}))
    assert code != 0 and "unauthorized" in text, text
    assert "wrong-pass" not in text
    assert [c for c in log("calls.log") if c[0] == "run"] == []
    assert not list(state.glob("docker-login-*"))
    # A public image (no login) is left to docker run: the agent pulls nothing itself.
    text, code, _ = agent.do_prepare(payload(f"{registry.host}/team/trainer:1.0", None))
    assert code == 0, text
    assert [c for c in log("calls.log") if c[0] == "pull"] == [["pull", f"{registry.host}/team/trainer:1.0"]]


def test_save_as_image_commits_and_pushes_with_the_operators_login(registry, node):
    agent, state, log, docker_dir = node
    registry.push("base/image", "1")
    text, code, _ = agent.do_prepare(payload(f"{registry.host}/base/image:1",
                                             {"registry": registry.host, "username": USER, "password": PASSWORD}))
    assert code == 0, text
    target = f"{registry.host}/acme-lab/my-model:v1"
    text, code, meta = agent.do_image_save({"container": "cardmix-inst-1-0", "reference": target,
                                            "registry_auth": {"registry": registry.host, "username": USER,
                                                              "password": PASSWORD}})
    assert code == 0, text
    pushed = registry.manifest("acme-lab/my-model", "v1")
    assert pushed.status_code == 200  # the registry really holds it
    assert meta == {"reference": target, "digest": pushed.headers["Docker-Content-Digest"]}
    [push] = log("pushes.log")
    assert push["user"] == USER and not os.path.exists(push["docker_config"])
    assert json.loads((docker_dir / "images.json").read_text()) == {}  # the node keeps no copy
    assert PASSWORD not in (docker_dir / "calls.log").read_text() and PASSWORD not in text
    # A container that does not exist, or names that are not names, fail without pushing anything.
    text, code, _ = agent.do_image_save({"container": "cardmix-nothing-0", "reference": target})
    assert code != 0 and "No such container" in text
    text, code, _ = agent.do_image_save({"container": "x; rm -rf /", "reference": target})
    assert code == 2 and "refusing" in text
    assert len(log("pushes.log")) == 1


def test_the_process_runtime_says_it_cannot_save(tmp_path):
    token = tmp_path / "token"
    token.write_text("cmxn_test\n")
    args = agent_mod.parse_args(["--server", "http://127.0.0.1:9", "--token-file", str(token), "--runtime",
                                 "process", "--vendor", "nvidia", "--state-dir", str(tmp_path / "s"),
                                 "--kernel-cmdline", "/nonexistent"])
    text, code, meta = agent_mod.Agent(args).do_image_save({"container": "c", "reference": "r.example/a/b:1"})
    assert (code, meta) == (2, {}) and "docker only" in text
