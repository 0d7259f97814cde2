"""The node agent itself (stdlib, imported from the built build/cardmix-agent.pyz): it survives malformed HTTP answers,
delivers results (retrying what may pass, never a 4xx), never hangs past a timeout or holds a whole output
in memory, keeps prepare retry-safe and never forgets a container it could not remove; each container has
its own network and port, a stale holder of that port is removed, and after an upgrade a release also
removes what the previous version started; a bare-metal release or wipe gives root's authorized_keys back
as the operator had it. Docker runs against the fake CLI tests/hardware/bin/docker."""
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from .conftest import BIN, agent_package, http, wait_for

agent_mod = agent_package()
agent_keys = agent_package("keys")  # where the bare-metal keys code looks atomic_put up

GARBAGE = b"garbage\r\n\r\n"  # not HTTP at all: http.client raises BadStatusLine
TRUNCATED = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"res"  # IncompleteRead


def make_agent(tmp_path, server_url="http://127.0.0.1:9", *extra):
    args = agent_mod.parse_args(["--server", server_url, "--token", "cmxn_test", "--runtime", "process",
                                 "--vendor", "nvidia", "--nvidia-smi", str(BIN / "nvidia-smi"),
                                 "--state-dir", str(tmp_path / "state"), "--heartbeat-interval", "0.05",
                                 "--poll-interval", "0.05", "--http-timeout", "5", *extra])
    agent = agent_mod.Agent(args)
    agent.result_backoff_s = (0.01, 0.05)
    return agent


@pytest.fixture
def serving():
    """Runs agents' serve() in threads; stops them at teardown."""
    agents = []

    def start(agent):
        agents.append(agent)
        thread = threading.Thread(target=agent.serve, daemon=True)
        thread.start()
        return thread
    yield start
    for agent in agents:
        agent.stop.set()


# -- 1. malformed answers never end the heartbeats, the polls or a result --------------------------------

def test_heartbeats_go_on_after_malformed_answers(tmp_path, raw_server, serving):
    def answer(method, path, body, hits):
        n = sum(p.endswith("heartbeat/") for _, p in hits)
        if path.endswith("heartbeat/"):
            return {2: GARBAGE, 3: TRUNCATED, 4: b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n{x]"}.get(
                n, http(200, {"heartbeat_interval_s": 0.05}))
        return http(200, {"results": []})
    server = raw_server(answer)
    agent = make_agent(tmp_path, server.url)
    serve = serving(agent)
    wait_for(lambda: server.count("heartbeat/") >= 8, timeout=20, what="heartbeats after the bad answers")
    assert serve.is_alive()
    assert any(t.name == "heartbeat" and t.is_alive() for t in threading.enumerate())


def test_command_polling_goes_on_after_malformed_answers(tmp_path, raw_server, serving):
    command = {"id": "c-1", "kind": "topology", "payload": {"collective": "nccl"}}

    def answer(method, path, body, hits):
        if path.endswith("commands/?limit=1&lease=1"):
            n = sum(p.endswith("commands/?limit=1&lease=1") for _, p in hits)
            return {1: GARBAGE, 2: TRUNCATED, 3: http(200, [1, 2])}.get(
                n, http(200, {"results": [command] if n == 4 else []}))
        return http(200, {})
    server = raw_server(answer)
    serve = serving(make_agent(tmp_path, server.url))
    wait_for(lambda: server.count("commands/c-1/result/") == 1, timeout=20, what="the command's result")
    result = server.bodies[[p for _, p in server.hits].index("/api/v1/agent/commands/c-1/result/")]
    assert result["exit_code"] == 0 and "GPU0" in result["output"]
    assert serve.is_alive()


def test_commands_are_claimed_one_at_a_time_and_the_next_poll_follows_at_once(tmp_path, raw_server, serving):
    queued = [{"id": f"c-{n}", "kind": "topology", "payload": {}} for n in range(3)]

    def answer(method, path, body, hits):
        if "/commands/" in path and "/result/" not in path:  # a platform that honours the limit
            return http(200, {"results": queued[:1] if "?limit=1&" in path else queued})
        if path.endswith("/result/"):
            queued.pop(0)
        return http(200, {})
    server = raw_server(answer)
    # Before: the agent claimed a batch (a restart lost what it held unstarted), then paused a poll interval.
    serving(make_agent(tmp_path, server.url, "--poll-interval", "30"))
    wait_for(lambda: server.count("c-2/result/") == 1, timeout=10, what="the three results, without a pause")
    polls = [p for _, p in server.hits if "/commands/" in p and "/result/" not in p]
    assert polls[:3] == ["/api/v1/agent/commands/?limit=1&lease=1"] * 3
    assert [p for _, p in server.hits if p.endswith("/result/")] == [
        f"/api/v1/agent/commands/c-{n}/result/" for n in range(3)]
    assert server.count("/start/") == 0  # handed out without a lease (a platform before 1.3.0): nothing to ask


def test_a_platform_that_ignores_the_limit_gets_every_command_it_hands_out_run(tmp_path, raw_server, serving):
    batch = [{"id": f"c-{n}", "kind": "topology", "payload": {}} for n in range(3)]

    def answer(method, path, body, hits):  # before 1.2.0: ten at a time, whatever the agent asks
        first = sum("/commands/" in p and "/result/" not in p for _, p in hits) == 1
        return http(200, {"results": batch if first else []}) if "/result/" not in path else http(200, {})
    server = raw_server(answer)
    serving(make_agent(tmp_path, server.url))
    wait_for(lambda: all(server.count(f"c-{n}/result/") == 1 for n in range(3)), timeout=10, what="the results")


def test_a_result_is_retried_through_malformed_answers_and_5xx_until_stored(tmp_path, raw_server):
    answers = [GARBAGE, TRUNCATED, http(502, {}), http(503, {}), http(500, {}), http(429, {}), http(408, {})]

    def answer(method, path, body, hits):
        n = sum(p.endswith("result/") for _, p in hits)
        return answers[n - 1] if n <= len(answers) else http(200, {"state": "done"})
    server = raw_server(answer)
    agent = make_agent(tmp_path, server.url)
    agent.execute({"id": "c-2", "kind": "topology", "payload": {}})
    assert server.count("c-2/result/") == len(answers) + 1  # more than the old 5 attempts
    assert server.bodies[-1]["exit_code"] == 0


@pytest.mark.parametrize("status", [401, 403, 422])
def test_a_4xx_result_is_not_retried(tmp_path, raw_server, status):
    server = raw_server(lambda *a: http(status, {"error": {"code": "x"}}))
    agent = make_agent(tmp_path, server.url)
    started = time.monotonic()
    agent.execute({"id": "c-3", "kind": "topology", "payload": {}})
    assert server.count("c-3/result/") == 1 and time.monotonic() - started < 5


def test_a_refused_result_is_replaced_by_its_exit_code_and_why(tmp_path, raw_server):
    refusal = {"error": {"code": "validation_error", "details": {"output": ["too long"]}}}
    server = raw_server(lambda method, path, body, hits: http(400, refusal) if len(hits) == 1 else http(200, {}))
    agent = make_agent(tmp_path, server.url)
    agent.execute({"id": "c-4", "kind": "topology", "payload": {}})
    assert server.count("c-4/result/") == 2
    fallback = server.bodies[-1]
    assert fallback["exit_code"] == 0 and "refused this command's output (400)" in fallback["output"]
    assert "too long" in fallback["output"]


def test_a_result_too_large_for_the_proxy_is_replaced_by_its_exit_code(tmp_path, raw_server):
    page = b"<html>413 Request Entity Too Large</html>"  # nginx past client_max_body_size: HTML, not JSON
    too_large = (f"HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: text/html\r\n"
                 f"Content-Length: {len(page)}\r\nConnection: close\r\n\r\n").encode() + page
    server = raw_server(lambda method, path, body, hits: too_large if len(hits) == 1 else http(200, {}))
    agent = make_agent(tmp_path, server.url)
    agent.execute({"id": "c-6", "kind": "topology", "payload": {}})
    assert server.count("c-6/result/") == 2  # before: dropped, and the platform waited for it until its timeout
    fallback = server.bodies[-1]
    assert fallback["exit_code"] == 0 and "refused this command's output (413)" in fallback["output"]


def test_result_retries_are_bounded(tmp_path, raw_server):
    server = raw_server(lambda *a: http(503, {}))
    agent = make_agent(tmp_path, server.url, "--result-retry-seconds", "0.5")
    started = time.monotonic()
    agent.execute({"id": "c-5", "kind": "topology", "payload": {}})
    assert time.monotonic() - started < 3 and server.count("c-5/result/") >= 3


# -- 5. NUL in output or meta never loses a result ----------------------------------------------------------

def test_nul_in_meta_is_replaced():
    assert agent_mod.scrub({"k\x00": ["v\x00", 1, {"n": "x\x00"}]}) == {"k\ufffd": ["v\ufffd", 1, {"n": "x\ufffd"}]}


def test_nul_in_output_is_replaced(tmp_path, raw_server):
    assert agent_mod.clip("a\x00b") == "a\ufffdb"
    tool = tmp_path / "all_reduce_perf"
    tool.write_text("#!/bin/sh\nprintf 'nccl\\000out\\n'\n")
    tool.chmod(0o755)
    server = raw_server(lambda *a: http(200, {}))
    agent = make_agent(tmp_path, server.url, "--readiness-bin", str(tool))
    agent.execute({"id": "c-6", "kind": "readiness", "payload": {"command": "all_reduce_perf -b 8G", "cards": [0]}})
    assert server.bodies[-1]["output"] == "nccl\ufffdout\n"


def test_nul_in_what_the_smi_prints_never_reaches_the_heartbeat(tmp_path, raw_server):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '0, NVIDIA H100\\000, GPU-0, 81559 MiB, 550.90.07, 30, 0\\n'\n")
    smi.chmod(0o755)
    server = raw_server(lambda *a: http(200, {}))
    assert make_agent(tmp_path, server.url, "--nvidia-smi", str(smi)).heartbeat()
    sent = server.bodies[-1]
    assert sent["devices"][0]["name"] == "NVIDIA H100\ufffd" and "\\u0000" not in json.dumps(sent)


# -- 7. run() returns in time, with bounded output ----------------------------------------------------------

@pytest.fixture
def straggler(tmp_path):
    """A program whose helper leaves its process group (setsid) and holds the output pipe; killed at teardown."""
    pid_file = tmp_path / "straggler.pid"
    yield pid_file
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def test_run_returns_soon_after_its_timeout_although_a_helper_holds_the_pipe(straggler):
    started = time.monotonic()
    text, code = agent_mod.run(["/bin/sh", "-c", f"setsid sleep 60 & echo $! > {straggler}; echo started; sleep 100"],
                               timeout=1)
    assert time.monotonic() - started < 7  # the 1 s timeout, then at most two 2 s grace periods
    assert code == 124 and "started" in text and "killed after 1 s" in text


def test_run_returns_when_the_program_ends_although_a_helper_holds_the_pipe(straggler):
    started = time.monotonic()
    text, code = agent_mod.run(["/bin/sh", "-c", f"setsid sleep 60 & echo $! > {straggler}; echo done"], timeout=30)
    assert time.monotonic() - started < 5  # a 2 s grace period for the rest of the output
    assert (text, code) == ("done\n", 0)


def test_run_keeps_only_the_head_and_the_tail():
    program = "echo FIRST; head -c 20000000 /dev/zero | tr '\\0' x; echo; echo LAST"
    text, code = agent_mod.run(["/bin/sh", "-c", program], timeout=60)
    assert code == 0
    assert len(text) <= agent_mod.OUTPUT_HEAD + agent_mod.OUTPUT_TAIL + 100
    assert text.startswith("FIRST\n") and text.endswith("LAST\n") and "bytes omitted]" in text


def test_run_small_outputs_and_errors_are_unchanged():
    program = "printf 'h\\303\\251llo'; echo err >&2; exit 3"
    assert agent_mod.run(["/bin/sh", "-c", program], timeout=10) == ("héllo" + "err\n", 3)
    assert agent_mod.run(["/nonexistent/tool"], timeout=5)[1] == 127


# -- 6. prepare is retry-safe; nothing is forgotten ---------------------------------------------------------

def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


PAYLOAD = {"instance_id": "inst-1", "kind": "container", "cards": [0, 1], "image": "pytorch:2.3",
           "ssh_keys": ["ssh-ed25519 AAAA test"], "env": {"A": "1"}, "vendor": "nvidia", "collective": "nccl"}


def test_process_prepare_twice_leaves_one_process_and_release_stops_it(tmp_path):
    agent = make_agent(tmp_path)
    first = agent.do_prepare(PAYLOAD)[2]["pid"]
    try:
        text, code, meta = agent.do_prepare(PAYLOAD)  # a retried prepare
        second = meta["pid"]
        assert code == 0 and f"process {first} stopped" in text
        wait_for(lambda: not alive(first), timeout=10, what="the first process to end")
        assert alive(second)
        assert f"process {second} stopped" in agent.do_release(PAYLOAD)[0]
        wait_for(lambda: not alive(second), timeout=10, what="the second process to end")
        assert agent.instances() == []
    finally:
        for pid in (first, locals().get("second")):
            if pid and alive(pid):
                os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def stranger():
    """An unrelated process in a session of its own (as the stand-ins are), e.g. one that got a stale pid."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("recorded", ["another boot", None])  # None: a pid file written before 1.2.0
def test_process_release_and_wipe_never_signal_a_process_that_reused_the_pid(tmp_path, stranger, recorded):
    agent = make_agent(tmp_path)
    ours = agent.do_prepare(PAYLOAD)[2]["pid"]
    where = agent.state_dir / "instances" / "cardmix-inst-1"
    try:
        assert alive(ours) and (where / "pid.start").read_text()  # its boot and start time, next to the pid
        os.killpg(ours, signal.SIGKILL)  # then the node reboots: its pid is someone else's now
        wait_for(lambda: not alive(ours), timeout=10, what="the stand-in to end")
        (where / "pid").write_text(str(stranger))
        if recorded:
            (where / "pid.start").write_text(recorded)
        else:
            (where / "pid.start").unlink()
        text, code, _ = agent.do_release(PAYLOAD)
        assert code == 0 and f"process {stranger} is not the one started for cardmix-inst-1" in text, text
        assert alive(stranger)  # before: SIGTERM to its process group
        assert agent.instances() == []
        agent.do_prepare(PAYLOAD)
        (where / "pid").write_text(str(stranger))
        assert "left alone" in agent.do_wipe({"collective": "nccl"})[0] and alive(stranger)
    finally:
        if alive(ours):
            os.killpg(ours, signal.SIGKILL)


def test_process_release_of_a_pid_file_written_before_the_start_time_was_recorded(tmp_path):
    agent = make_agent(tmp_path)
    pid = agent.do_prepare(PAYLOAD)[2]["pid"]
    (agent.state_dir / "instances" / "cardmix-inst-1" / "pid.start").unlink()  # as an agent before 1.2.0 left it
    try:
        text, code, _ = agent.do_release(PAYLOAD)
        assert code == 0 and f"process {pid} stopped" in text, text  # it runs in the instance's directory: ours
        wait_for(lambda: not alive(pid), timeout=10, what="the process to end")
    finally:
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)


@pytest.mark.parametrize("content", ["", "12"])  # a full disk: empty, or the first digits of the pid
def test_process_release_and_wipe_survive_an_empty_or_truncated_pid_file(tmp_path, content):
    agent = make_agent(tmp_path)
    pids = [agent.do_prepare(PAYLOAD)[2]["pid"]]
    try:
        (agent.state_dir / "instances" / "cardmix-inst-1" / "pid").write_text(content)
        text, code, _ = agent.do_release(PAYLOAD)  # before: ValueError on every release; "12" is not ours
        assert code == 0 and re.search(r"pid file of cardmix-inst-1 unreadable|12 already gone|left alone", text)
        assert agent.instances() == []
        pids.append(agent.do_prepare(PAYLOAD)[2]["pid"])
        (agent.state_dir / "instances" / "cardmix-inst-1" / "pid").write_text("")
        text, code, _ = agent.do_wipe({"collective": "nccl"})
        assert "pid file of cardmix-inst-1 unreadable" in text and agent.instances() == [], text
    finally:
        for pid in pids:
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)


def docker_agent(tmp_path):
    return make_agent(tmp_path, "http://127.0.0.1:9", "--runtime", "docker", "--docker", str(BIN / "docker"))


def test_docker_prepare_twice_replaces_the_container(tmp_path, docker):
    agent = docker_agent(tmp_path)
    assert agent.do_prepare(PAYLOAD)[1] == 0
    text, code, meta = agent.do_prepare(PAYLOAD)  # without the rm first: a name conflict, exit 125
    assert code == 0, text
    assert [c["name"] for c in docker.containers().values()] == ["cardmix-inst-1"]
    assert meta == {"container": "cardmix-inst-1", "ssh_port": None}


def test_docker_release_that_fails_keeps_the_instance_and_wipe_removes_every_labelled_container(tmp_path, docker):
    agent = docker_agent(tmp_path)
    agent.do_prepare(PAYLOAD)
    agent.do_prepare({**PAYLOAD, "instance_id": "inst-2"})
    (agent.state_dir / "instances" / "cardmix-inst-2").rename(tmp_path / "forgotten")  # e.g. by an older agent
    docker.daemon(up=False)
    text, code, _ = agent.do_release(PAYLOAD)
    assert code != 0 and "Cannot connect to the Docker daemon" in text
    assert agent.instances() == ["cardmix-inst-1"]  # still reported in the heartbeat, still known to wipe
    assert len(docker.containers()) == 2
    text, code, _ = agent.do_wipe({"collective": "nccl"})
    assert code != 0 and "docker ps failed" in text
    assert agent.instances() == ["cardmix-inst-1"]
    docker.daemon(up=True)
    text, code, _ = agent.do_wipe({"collective": "nccl"})
    assert code == 0, text
    assert "removed 2 instance container(s)" in text
    assert docker.containers() == {} and agent.instances() == []
    assert agent.do_release(PAYLOAD)[1] == 0  # a late retry of the release: already gone is fine


# -- 8. tenants sharing a node never share IPC --------------------------------------------------------------

def test_docker_run_gives_each_container_its_own_ipc_namespace(tmp_path, docker):
    agent = docker_agent(tmp_path)
    argv = agent.runtime.docker_run_argv(PAYLOAD, tmp_path / "keys")
    assert argv[argv.index("--ipc") + 1] == "private"
    assert argv[argv.index("--shm-size") + 1] == "32g"
    assert argv[argv.index("--label") + 1] == "cardmix.instance=inst-1"
    assert argv.count("--ipc") == 1 and "host" not in [argv[i + 1] for i, a in enumerate(argv) if a == "--ipc"]
    custom = make_agent(tmp_path, "http://127.0.0.1:9", "--runtime", "docker", "--shm-size", "8g")
    argv = custom.runtime.docker_run_argv(PAYLOAD, tmp_path / "keys")
    assert argv[argv.index("--shm-size") + 1] == "8g"



def test_docker_run_limits_two_containers_on_a_node_in_proportion_to_their_cards(tmp_path, docker):
    """What `docker run` was given (the fake CLI's recorded argv) for two groups on a 16-CPU, 64 GiB node: the
    platform's limits for 2 and 6 of its 8 cards. Before: neither had any limit."""
    agent = docker_agent(tmp_path)
    for iid, cards, millicpus, mib in (("inst-a", [0, 1], 4000, 16384), ("inst-b", [2, 3, 4, 5, 6, 7], 12000, 49152)):
        payload = {**PAYLOAD, "instance_id": iid, "cards": cards, "name": f"cardmix-{iid}-{cards[0]}",
                   "ssh_port": 30000 + cards[0], "limits": {"millicpus": millicpus, "memory_mib": mib}}
        text, code, _ = agent.do_prepare(payload)
        assert code == 0, text
    runs = {c["name"]: c["argv"] for c in docker.containers().values()}

    def flags(argv):
        return {f: argv[argv.index(f) + 1] for f in ("--cpus", "--memory", "--memory-swap")}
    assert flags(runs["cardmix-inst-a-0"]) == {"--cpus": "4", "--memory": "16384m", "--memory-swap": "16384m"}
    assert flags(runs["cardmix-inst-b-2"]) == {"--cpus": "12", "--memory": "49152m", "--memory-swap": "49152m"}

# -- 9. tenants sharing a node never share a network namespace or an SSH port ---------------------------------

def _platform_payload(instance_id: str, cards: list[int]) -> dict:
    """A prepare as the platform's agent driver sends it: the group's container name and SSH port."""
    return {**PAYLOAD, "instance_id": instance_id, "cards": cards, "name": f"cardmix-{instance_id}-{min(cards)}",
            "ssh_port": 30000 + min(cards)}


def test_docker_run_publishes_the_platform_port_on_a_network_of_its_own(tmp_path, docker):
    agent = docker_agent(tmp_path)
    argv = agent.runtime.docker_run_argv(_platform_payload("inst-1", [2, 3]), tmp_path / "keys")
    # Its own network (named as the container), not the default bridge every container shares.
    assert argv[argv.index("--network") + 1] == "cardmix-inst-1-2" and argv.count("--network") == 1
    assert argv[argv.index("-p") + 1] == "30002:22"
    assert argv[argv.index("--name") + 1] == "cardmix-inst-1-2"
    # A platform that sends no port (older) gets the host network it expects, and no published port.
    legacy = agent.runtime.docker_run_argv(PAYLOAD, tmp_path / "keys")
    assert legacy[legacy.index("--network") + 1] == "host" and "-p" not in legacy


def test_two_groups_of_one_instance_on_one_node_are_two_containers(tmp_path, docker):
    agent = docker_agent(tmp_path)
    first, second = _platform_payload("inst-1", [0, 1]), _platform_payload("inst-1", [2, 3])
    assert agent.do_prepare(first)[1] == 0
    text, code, meta = agent.do_prepare(second)  # before: the same name, so it removed the first container
    assert code == 0, text
    assert meta == {"container": "cardmix-inst-1-2", "ssh_port": 30002}
    running = {c["name"]: c["ports"] for c in docker.containers().values()}
    assert running == {"cardmix-inst-1-0": ["30000"], "cardmix-inst-1-2": ["30002"]}
    assert agent.instances() == ["cardmix-inst-1-0", "cardmix-inst-1-2"]
    text, code, _ = agent.do_release({"instance_id": "inst-1", "cards": [0, 1], "name": "cardmix-inst-1-0"})
    assert code == 0, text
    assert [c["name"] for c in docker.containers().values()] == ["cardmix-inst-1-2"]  # the other one stays
    assert agent.instances() == ["cardmix-inst-1-2"]


def test_a_container_that_outlived_its_release_no_longer_blocks_its_port(tmp_path, docker):
    agent = docker_agent(tmp_path)
    assert agent.do_prepare(_platform_payload("inst-1", [0, 1]))[1] == 0  # its release never came through
    assert agent.do_prepare(_platform_payload("inst-3", [4]))[1] == 0  # another port: stays
    # The platform freed cards 0-1; the next group whose first card is 0 gets the same port. Before: "port is
    # already allocated", on every attempt.
    text, code, meta = agent.do_prepare(_platform_payload("inst-2", [0]))
    assert code == 0, text
    assert "cardmix-inst-1-0" in text and "30000" in text  # says what it removed, and why
    running = {c["name"]: c["ports"] for c in docker.containers().values()}
    assert running == {"cardmix-inst-2-0": ["30000"], "cardmix-inst-3-4": ["30004"]}
    assert set(docker.networks()) == {"cardmix-inst-2-0", "cardmix-inst-3-4"}
    assert agent.instances() == ["cardmix-inst-2-0", "cardmix-inst-3-4"]
    assert agent.do_release(_release("inst-1", [0, 1]))[1] == 0  # a late release of the stale one: gone is fine
    assert len(docker.containers()) == 2


def test_a_port_held_by_a_container_the_agent_did_not_start_still_fails_the_prepare_loudly(tmp_path, docker):
    agent = docker_agent(tmp_path)
    docker.run("run", "-d", "--name", "operators-own", "-p", "30000:22", "some-image")  # no cardmix label
    text, code, _ = agent.do_prepare(_platform_payload("inst-2", [0]))
    assert code == 125 and "port is already allocated" in text
    assert "operators-own" in [c["name"] for c in docker.containers().values()]


def test_a_process_that_outlived_its_release_gives_its_port_up(tmp_path):
    agent = make_agent(tmp_path)
    stale = agent.do_prepare(_platform_payload("inst-1", [0, 1]))[2]["pid"]
    other = agent.do_prepare(_platform_payload("inst-3", [4]))[2]["pid"]
    assert (agent.state_dir / "instances" / "cardmix-inst-1-0" / "port").read_text() == "30000"
    pids = [stale, other]
    try:
        text, code, meta = agent.do_prepare(_platform_payload("inst-2", [0]))
        pids.append(meta.get("pid"))
        assert code == 0 and f"process {stale} stopped" in text and "30000" in text, text
        wait_for(lambda: not alive(stale), timeout=10, what="the stale process to end")
        assert alive(meta["pid"]) and alive(other)
        assert agent.instances() == ["cardmix-inst-2-0", "cardmix-inst-3-4"]
    finally:
        for pid in pids:
            if pid and alive(pid):
                os.killpg(pid, signal.SIGKILL)

# -- 10. after an upgrade, a release leaves nothing running on the cards it frees ---------------------------

def _release(instance_id: str, cards: list[int]) -> dict:
    """A release as the platform's agent driver sends it (the group's container name)."""
    return {"instance_id": instance_id, "cards": cards, "name": f"cardmix-{instance_id}-{min(cards)}"}


# This agent given a platform's payload without a name keeps it in instances/cardmix-<id>; an agent before
# 1.1.0 kept it in instances/<id>. Both named the container cardmix-<id>.
@pytest.mark.parametrize("kept_in", ["cardmix-inst-1", "inst-1"])
def test_docker_release_after_an_upgrade_removes_the_container_started_without_a_name(tmp_path, docker, kept_in):
    agent = docker_agent(tmp_path)
    assert agent.do_prepare(PAYLOAD)[1] == 0  # the platform before the upgrade: no name, no port
    assert agent.do_prepare({**PAYLOAD, "instance_id": "inst-2"})[1] == 0  # another tenant's, also legacy
    assert agent.do_prepare(_platform_payload("inst-1", [2, 3]))[1] == 0  # the instance's other group, new style
    instances = agent.state_dir / "instances"
    (instances / "cardmix-inst-1").rename(instances / kept_in)
    text, code, _ = agent.do_release(_release("inst-1", [0, 1]))  # before: "No such container" = success
    assert code == 0, text
    assert "cardmix-inst-1 " in text  # said what it removed
    assert sorted(c["name"] for c in docker.containers().values()) == ["cardmix-inst-1-2", "cardmix-inst-2"]
    assert agent.instances() == ["cardmix-inst-1-2", "cardmix-inst-2"]
    assert agent.do_release(_release("inst-1", [0, 1]))[1] == 0  # a retried release: nothing left is fine


@pytest.mark.parametrize("kept_in", ["cardmix-inst-1", "inst-1"])
def test_process_release_after_an_upgrade_stops_the_process_started_without_a_name(tmp_path, kept_in):
    agent = make_agent(tmp_path)
    legacy = agent.do_prepare(PAYLOAD)[2]["pid"]
    other = agent.do_prepare({**PAYLOAD, "instance_id": "inst-2"})[2]["pid"]
    instances = agent.state_dir / "instances"
    (instances / "cardmix-inst-1").rename(instances / kept_in)
    try:
        text, code, _ = agent.do_release(_release("inst-1", [0, 1]))
        assert code == 0 and f"process {legacy} stopped" in text, text
        wait_for(lambda: not alive(legacy), timeout=10, what="the process started without a name to end")
        assert alive(other)  # another instance's legacy process is not touched
        assert agent.instances() == ["cardmix-inst-2"]
    finally:
        for pid in (legacy, other):
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)


# -- 11. tenants on one node do not share a network: each container has its own ------------------------------

def test_each_container_gets_a_network_of_its_own_which_release_and_wipe_remove(tmp_path, docker):
    agent = docker_agent(tmp_path)
    docker.run("network", "create", "someone-elses")  # not the agent's: never removed
    first, second = _platform_payload("inst-1", [0, 1]), _platform_payload("inst-2", [2, 3])
    assert agent.do_prepare(first)[1] == 0
    assert agent.do_prepare(second)[1] == 0
    running = {c["name"]: c["network"] for c in docker.containers().values()}
    assert running == {"cardmix-inst-1-0": "cardmix-inst-1-0", "cardmix-inst-2-2": "cardmix-inst-2-2"}
    assert docker.networks() == {"someone-elses": {"labels": {}},
                                 "cardmix-inst-1-0": {"labels": {"cardmix.instance": "inst-1"}},
                                 "cardmix-inst-2-2": {"labels": {"cardmix.instance": "inst-2"}}}
    calls = [c[:2] for c in docker.calls()]
    assert calls.index(["network", "create"]) < calls.index(["run", "-d"])  # the network exists before the run

    text, code, _ = agent.do_prepare(first)  # a retried prepare: the network from the first attempt will do
    assert code == 0, text
    assert set(docker.networks()) == {"someone-elses", "cardmix-inst-1-0", "cardmix-inst-2-2"}

    text, code, _ = agent.do_release(_release("inst-1", [0, 1]))
    assert code == 0, text
    assert set(docker.networks()) == {"someone-elses", "cardmix-inst-2-2"}  # after its container, not before
    assert agent.do_release(_release("inst-1", [0, 1]))[1] == 0  # a retry: a missing network is fine

    assert agent.do_prepare(first)[1] == 0
    text, code, _ = agent.do_wipe({"collective": "nccl"})
    assert code == 0, text
    assert "removed 2 instance container(s)" in text and "removed 2 instance network(s)" in text
    assert docker.containers() == {} and set(docker.networks()) == {"someone-elses"}


def test_a_platform_that_sends_no_port_gets_the_host_network_and_no_network_is_created(tmp_path, docker):
    agent = docker_agent(tmp_path)
    text, code, _ = agent.do_prepare(PAYLOAD)
    assert code == 0, text
    assert [c["network"] for c in docker.containers().values()] == ["host"]
    assert docker.networks() == {} and not [c for c in docker.calls() if c[:2] == ["network", "create"]]
    assert agent.do_release({"instance_id": "inst-1", "cards": [0, 1]})[1] == 0
    assert docker.containers() == {}


# -- 12. the prepare's meta says which port was published: the platform stores it as the SSH endpoint ---------

def test_docker_prepare_meta_reports_the_port_actually_published(tmp_path, docker):
    agent = docker_agent(tmp_path)
    meta = agent.do_prepare({**_platform_payload("inst-1", [2, 3]), "ssh_port": "30002"})[2]
    assert meta == {"container": "cardmix-inst-1-2", "ssh_port": 30002}
    assert agent.do_prepare(PAYLOAD)[2] == {"container": "cardmix-inst-1", "ssh_port": None}  # the host network
    docker.run("run", "-d", "--name", "operators-own", "-p", "30000:22", "some-image")
    text, code, meta = agent.do_prepare(_platform_payload("inst-2", [0]))
    assert code == 125 and meta == {"container": "cardmix-inst-2-0", "ssh_port": None}, text  # nothing published
    docker.daemon(up=False)
    text, code, meta = agent.do_prepare(_platform_payload("inst-3", [4]))
    assert code != 0 and meta == {"container": "cardmix-inst-3-4", "ssh_port": None}, text


def test_process_prepare_meta_reports_the_port_it_was_given(tmp_path):
    agent = make_agent(tmp_path)
    pids = []
    try:
        for payload, port in ((_platform_payload("inst-1", [2, 3]), 30002), (PAYLOAD, None)):
            text, code, meta = agent.do_prepare(payload)
            pids.append(meta["pid"])
            assert code == 0 and meta["ssh_port"] == port and type(meta["ssh_port"]) is type(port), text
    finally:
        for pid in pids:
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)


# -- 13. a bare-metal tenant's root login ends with the instance; the operator's own keys come back ----------

BARE = {"kind": "bare_metal", "instance_id": "bm-1", "cards": list(range(8)), "image": "ubuntu-22.04",
        "ssh_keys": ["ssh-ed25519 AAAA tenant-one"], "env": {"A": "1"}, "vendor": "nvidia", "collective": "nccl"}


def bare_metal_agent(tmp_path, root_keys):
    return make_agent(tmp_path, "http://127.0.0.1:9", "--runtime", "docker", "--docker", str(BIN / "docker"),
                      "--authorized-keys", str(root_keys))


def mode(path):
    return os.lstat(path).st_mode & 0o777


def saved_originals(tmp_path):
    return sorted((tmp_path / "state" / "original-authorized-keys").glob("*"))


def test_bare_metal_release_and_wipe_remove_the_tenants_keys_from_root(tmp_path, docker):
    root_keys = tmp_path / "root" / ".ssh" / "authorized_keys"  # none there: nothing of the operator's to keep
    agent = bare_metal_agent(tmp_path, root_keys)
    assert agent.do_prepare(BARE)[1] == 0 and root_keys.read_text() == "ssh-ed25519 AAAA tenant-one\n"
    assert mode(root_keys) == 0o600 and mode(root_keys.parent) == 0o700  # what sshd's StrictModes wants
    text, code, _ = agent.do_release({"cards": [], "instance_id": "bm-1"})  # what the agent driver sends
    assert code == 0, text
    assert not root_keys.exists() and agent.instances() == []  # before: the keys stayed, root stayed theirs
    assert agent.do_prepare({**BARE, "instance_id": "bm-2", "ssh_keys": ["ssh-ed25519 BBBB tenant-two"]})[1] == 0
    agent.do_wipe({"collective": "nccl"})  # its release never reached the agent; cleaning wipes the node
    assert not root_keys.exists() and saved_originals(tmp_path) == []
    assert agent.do_release({"cards": [], "instance_id": "bm-9"})[1] == 0  # never prepared here: nothing to do


# The operator's own keys, as an operator's file may be: a comment, CRLF, no final newline, not 0600.
OPERATORS = b"# ops\r\nssh-ed25519 AAAAops operator@bastion\nssh-rsa AAAAB3 backup-key"


def test_bare_metal_release_puts_the_operators_own_keys_back_byte_for_byte(tmp_path, docker):
    root_keys = tmp_path / "root" / ".ssh" / "authorized_keys"
    root_keys.parent.mkdir(parents=True)
    root_keys.write_bytes(OPERATORS)
    root_keys.chmod(0o640)
    agent = bare_metal_agent(tmp_path, root_keys)
    text, code, _ = agent.do_prepare(BARE)
    assert code == 0, text
    assert root_keys.read_text() == "ssh-ed25519 AAAA tenant-one\n" and mode(root_keys) == 0o600  # theirs only
    [saved] = saved_originals(tmp_path)
    assert mode(saved) == 0o600 and mode(saved.parent) == 0o700 and b"AAAAops" not in saved.read_bytes()

    # The same prepare again (a retry), then another tenant's without a release between, then one after an agent
    # restart: each replaces the keys, none replaces the saved original with a tenant's.
    assert agent.do_prepare(BARE)[1] == 0
    assert agent.do_prepare({**BARE, "instance_id": "bm-2", "ssh_keys": ["ssh-ed25519 BBBB tenant-two"]})[1] == 0
    restarted = bare_metal_agent(tmp_path, root_keys)
    assert restarted.do_prepare({**BARE, "instance_id": "bm-3", "ssh_keys": ["ssh-ed25519 CCCC three"]})[1] == 0
    assert root_keys.read_text() == "ssh-ed25519 CCCC three\n" and len(saved_originals(tmp_path)) == 1

    text, code, _ = restarted.do_release({"cards": [], "instance_id": "bm-3"})
    assert code == 0, text
    assert root_keys.read_bytes() == OPERATORS and mode(root_keys) == 0o640  # before: emptied, the operator's gone
    assert os.stat(root_keys).st_uid == os.getuid() and saved_originals(tmp_path) == []
    for other in ("bm-1", "bm-2"):  # their keys went with the restore: their releases leave the operator's alone
        assert restarted.do_release({"cards": [], "instance_id": other})[1] == 0
        assert root_keys.read_bytes() == OPERATORS
    assert [p.name for p in root_keys.parent.iterdir()] == ["authorized_keys"]  # no temporary file left


def test_a_warm_nodes_hand_over_installs_the_tenants_keys_and_its_release_gives_the_operators_back(tmp_path, docker):
    root_keys = tmp_path / "root" / ".ssh" / "authorized_keys"
    root_keys.parent.mkdir(parents=True)
    root_keys.write_bytes(OPERATORS)
    root_keys.chmod(0o640)
    agent = bare_metal_agent(tmp_path, root_keys)
    # The warm pool deploys the node for nobody: no keys, the operator's file saved.
    assert agent.do_prepare({**BARE, "instance_id": "warm-1", "ssh_keys": []})[1] == 0
    assert root_keys.read_bytes() == b""
    keys = ["ssh-ed25519 AAAA tenant-one", "ssh-ed25519 PPPP cardmix-platform"]
    # A key that is two lines would add one nobody chose: refused, nothing written.
    text, code, _ = agent.do_install_keys({"instance_id": "bm-1", "ssh_keys": [keys[0] + "\nssh-rsa EVIL x"]})
    assert code == 65 and "not one line" in text and root_keys.read_bytes() == b""
    text, code, meta = agent.do_install_keys({"instance_id": "bm-1", "ssh_keys": keys})
    assert code == 0 and f"2 ssh key(s) of bm-1 in {root_keys}" in text, text
    assert root_keys.read_text() == "".join(k + "\n" for k in keys) and mode(root_keys) == 0o600
    assert meta == {"instance_id": "bm-1", "ssh_keys": 2, "target": str(root_keys)}
    assert agent.do_install_keys({"instance_id": "bm-1", "ssh_keys": keys})[1] == 0  # a retry: the same file
    assert len(saved_originals(tmp_path)) == 1 and [p.name for p in root_keys.parent.iterdir()] == ["authorized_keys"]
    text, code, _ = agent.do_release({"cards": [], "instance_id": "bm-1"})
    assert code == 0 and "the operator's" in text, text
    assert root_keys.read_bytes() == OPERATORS and mode(root_keys) == 0o640 and saved_originals(tmp_path) == []
    # Another hand-over whose release never came: the wipe takes its keys away too.
    assert agent.do_install_keys({"instance_id": "bm-2", "ssh_keys": keys[:1]})[1] == 0
    assert agent.do_wipe({"collective": "nccl"})[1] == 0
    assert root_keys.read_bytes() == OPERATORS and agent.instances() == []


def test_wipe_puts_the_operators_own_keys_back(tmp_path, docker):
    root_keys = tmp_path / "root" / ".ssh" / "authorized_keys"
    root_keys.parent.mkdir(parents=True)
    root_keys.write_bytes(OPERATORS)
    root_keys.chmod(0o600)
    agent = bare_metal_agent(tmp_path, root_keys)
    assert agent.do_prepare(BARE)[1] == 0 and b"AAAAops" not in root_keys.read_bytes()
    assert agent.do_prepare({**BARE, "instance_id": "bm-2", "ssh_keys": ["ssh-ed25519 BBBB tenant-two"]})[1] == 0
    shutil.rmtree(root_keys.parent)  # what the tenant, root until now, may have done
    text, code, _ = agent.do_wipe({"collective": "nccl"})  # neither release reached the agent
    assert code == 0, text
    assert root_keys.read_bytes() == OPERATORS and mode(root_keys) == 0o600 and saved_originals(tmp_path) == []
    assert mode(root_keys.parent) == 0o700
    assert agent.do_wipe({"collective": "nccl"})[1] == 0 and root_keys.read_bytes() == OPERATORS  # again: as is


def test_a_symlinked_authorized_keys_comes_back_as_the_link_and_its_file_is_never_written(tmp_path, docker):
    managed = tmp_path / "etc" / "ssh" / "root_keys"  # e.g. a file config management owns
    managed.parent.mkdir(parents=True)
    managed.write_bytes(OPERATORS)
    root_keys = tmp_path / "root" / ".ssh" / "authorized_keys"
    root_keys.parent.mkdir(parents=True)
    root_keys.symlink_to(managed)
    agent = bare_metal_agent(tmp_path, root_keys)
    assert agent.do_prepare(BARE)[1] == 0
    assert not root_keys.is_symlink() and root_keys.read_text() == "ssh-ed25519 AAAA tenant-one\n"
    assert managed.read_bytes() == OPERATORS  # before: the tenant's keys were written through the link
    text, code, _ = agent.do_release({"cards": [], "instance_id": "bm-1"})
    assert code == 0, text
    assert root_keys.is_symlink() and os.readlink(root_keys) == str(managed)
    assert root_keys.read_bytes() == OPERATORS and saved_originals(tmp_path) == []


def test_a_crash_between_the_steps_never_leaves_the_tenants_keys_without_the_saved_original(tmp_path, docker,
                                                                                           monkeypatch):
    root_keys = tmp_path / "root" / ".ssh" / "authorized_keys"
    root_keys.parent.mkdir(parents=True)
    root_keys.write_bytes(OPERATORS)
    agent = bare_metal_agent(tmp_path, root_keys)
    real_put, real_unlink = agent_mod.atomic_put, Path.unlink

    def put(target, **kwargs):
        if Path(target) == root_keys:
            raise OSError(28, "No space left on device")
        return real_put(target, **kwargs)

    def unlink(path, *args, **kwargs):
        if path.parent.name == "original-authorized-keys":
            raise OSError(5, "Input/output error")
        return real_unlink(path, *args, **kwargs)

    # The prepare dies after saving the original, before the tenant's keys are in; then it is retried.
    monkeypatch.setattr(agent_keys, "atomic_put", put)
    with pytest.raises(OSError):
        agent.do_prepare(BARE)
    assert root_keys.read_bytes() == OPERATORS and len(saved_originals(tmp_path)) == 1
    monkeypatch.setattr(agent_keys, "atomic_put", real_put)
    assert agent.do_prepare(BARE)[1] == 0 and root_keys.read_text() == "ssh-ed25519 AAAA tenant-one\n"

    # The release dies putting the original back: the tenant's keys are still there, and so is the saved copy.
    monkeypatch.setattr(agent_keys, "atomic_put", put)
    with pytest.raises(OSError):
        agent.do_release({"cards": [], "instance_id": "bm-1"})
    assert len(saved_originals(tmp_path)) == 1
    monkeypatch.setattr(agent_keys, "atomic_put", real_put)

    # It dies after putting it back, before dropping the copy; then another tenant's prepare, and its release.
    monkeypatch.setattr(Path, "unlink", unlink)
    with pytest.raises(OSError):
        agent.do_release({"cards": [], "instance_id": "bm-1"})
    monkeypatch.setattr(Path, "unlink", real_unlink)
    assert root_keys.read_bytes() == OPERATORS and len(saved_originals(tmp_path)) == 1
    assert agent.do_prepare({**BARE, "instance_id": "bm-2", "ssh_keys": ["ssh-ed25519 BBBB tenant-two"]})[1] == 0
    assert agent.do_release({"cards": [], "instance_id": "bm-2"})[1] == 0
    assert root_keys.read_bytes() == OPERATORS and saved_originals(tmp_path) == []
    assert agent.do_release({"cards": [], "instance_id": "bm-1"})[1] == 0  # the retried release: nothing to undo
    assert root_keys.read_bytes() == OPERATORS


def test_keys_an_older_agent_installed_are_never_saved_as_the_operators(tmp_path, docker):
    """Upgraded to this agent while a tenant's keys (written by 1.2.0, which kept no original) are in the file,
    then a second prepare: a release must not put the first tenant's keys back as if they were the operator's."""
    root_keys = tmp_path / "root" / ".ssh" / "authorized_keys"
    root_keys.parent.mkdir(parents=True)
    root_keys.write_text("ssh-ed25519 AAAA tenant-one\n")
    old = tmp_path / "state" / "instances" / "bm-1"  # what the older agent's prepare left
    old.mkdir(parents=True)
    (old / "environment").write_text("A=1\n")
    agent = bare_metal_agent(tmp_path, root_keys)
    assert agent.do_prepare({**BARE, "instance_id": "bm-2", "ssh_keys": ["ssh-ed25519 BBBB tenant-two"]})[1] == 0
    assert agent.do_release({"cards": [], "instance_id": "bm-2"})[1] == 0
    assert not root_keys.exists()
    assert agent.do_release({"cards": [], "instance_id": "bm-1"})[1] == 0 and not root_keys.exists()


def test_process_runtime_bare_metal_keys_come_and_go_with_the_instance(tmp_path):
    agent = make_agent(tmp_path)
    text, code, _ = agent.do_prepare(BARE)
    keys = tmp_path / "state" / "instances" / "bm-1" / "authorized_keys"
    assert code == 0 and keys.read_text() == "ssh-ed25519 AAAA tenant-one\n" and mode(keys) == 0o600, text
    assert agent.do_prepare(BARE)[1] == 0  # a retry: the file it wrote is no original
    assert agent.do_release({"cards": [], "instance_id": "bm-1"})[1] == 0
    assert not keys.exists() and saved_originals(tmp_path) == []


# -- 14. wipe never discards a mounted disk, whatever name the operator gave it -----------------------------

def _mounted_block_device():
    for line in Path("/proc/mounts").read_text().splitlines():
        source = line.split()[0]
        if source.startswith("/dev/") and Path(source).is_block_device():
            return source
    pytest.skip("no mounted block device on this host")


def test_wipe_refuses_a_mounted_disk_named_through_a_link(tmp_path, monkeypatch):
    mounted = _mounted_block_device()
    by_id = tmp_path / "by-id" / "nvme-scratch"  # as in /dev/disk/by-id: what operators are told to use
    by_id.parent.mkdir()
    by_id.symlink_to(mounted)
    fake = tmp_path / "fakebin"  # never the real blkdiscard -f on this host's disk, even if the check fails
    fake.mkdir()
    (fake / "blkdiscard").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'discarded'}\n")
    (fake / "blkdiscard").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    agent = make_agent(tmp_path, "http://127.0.0.1:9", "--wipe-disk", str(by_id))
    text, code, _ = agent.do_wipe({"collective": "nccl"})
    assert f"refusing to wipe {by_id}: it is mounted" in text and code != 0, text
    assert not (tmp_path / "discarded").exists()  # before: /proc/mounts names the device, not the link


# -- 15. the readiness test runs on the group's cards, as nvidia-smi numbers them ----------------------------

def test_readiness_names_the_cards_in_nvidia_smi_order(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    tool = tmp_path / "all_reduce_perf"
    tool.write_text("#!/bin/sh\necho \"visible=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER\"\n")
    tool.chmod(0o755)
    agent = make_agent(tmp_path, "http://127.0.0.1:9", "--readiness-bin", str(tool))
    text, code, _ = agent.do_readiness({"cards": [4, 5], "collective": "nccl",
                                        "command": "all_reduce_perf -b 8G -e 8G -f 2 -g 2 -c 1"})
    # Without PCI_BUS_ID, CUDA counts fastest first: its 4,5 need not be nvidia-smi's (the group's) 4,5.
    assert code == 0 and text.strip() == "visible=4,5 order=PCI_BUS_ID", text


# -- 16. a leased command runs only once its start is acknowledged; a journal answers one cut short -------------

def leased(command_id="c-1", kind="topology", payload=None) -> dict:
    return {"id": command_id, "kind": kind, "payload": payload or {}, "lease": f"lease-{command_id}",
            "lease_until": "2030-01-01T00:00:00Z"}


def once(command):
    """An answer(): hands `command` out on the first poll, then nothing; `start` answers the start."""
    def answer(method, path, body, hits, start=lambda n: http(200, {"state": "delivered"})):
        if "/commands/?" in path:
            first = sum("/commands/?" in p for _, p in hits) == 1
            return http(200, {"results": [command] if first else []})
        if path.endswith("/start/"):
            return start(sum(p.endswith("/start/") for _, p in hits))
        return http(200, {"state": "done"})
    return answer


def marker_tool(tmp_path):
    """A readiness binary that leaves a file behind when it runs."""
    ran, tool = tmp_path / "ran", tmp_path / "all_reduce_perf"
    tool.write_text(f"#!/bin/sh\necho run >> {ran}\necho ok\n")
    tool.chmod(0o755)
    return ran, tool


def test_a_leased_command_runs_after_its_start_is_acknowledged(tmp_path, raw_server, serving):
    server = raw_server(once(leased()))
    agent = make_agent(tmp_path, server.url)
    serving(agent)
    wait_for(lambda: server.count("c-1/result/") == 1, timeout=10, what="the result")
    paths = [p for _, p in server.hits]
    assert paths.index("/api/v1/agent/commands/c-1/start/") < paths.index("/api/v1/agent/commands/c-1/result/")
    assert server.bodies[paths.index("/api/v1/agent/commands/c-1/start/")] == {"lease": "lease-c-1"}
    # Answered: forgotten (once the agent has the answer; the server records a hit before it answers).
    wait_for(lambda: list(agent.journal_dir.iterdir()) == [], timeout=5, what="the entry to be forgotten")


@pytest.mark.parametrize("status", [409, 404])
def test_a_refused_start_means_the_command_is_not_run(tmp_path, raw_server, serving, status):
    ran, tool = marker_tool(tmp_path)
    answer = once(leased(kind="readiness", payload={"command": "all_reduce_perf -b 8G", "cards": [0]}))
    server = raw_server(lambda *a: answer(*a, start=lambda n: http(status, {"error": {"code": "invalid_state"}})))
    serving(make_agent(tmp_path, server.url, "--readiness-bin", str(tool)))
    wait_for(lambda: server.count("/commands/?limit=1&lease=1") >= 3, timeout=10, what="the polls after it")
    # Before: the agent ran whatever it was handed; a command whose lease ran out is handed out again (or the
    # platform stopped waiting for it): running it here too could run it twice.
    assert server.count("c-1/start/") == 1 and server.count("c-1/result/") == 0 and not ran.exists()
    assert list((tmp_path / "state" / "journal").iterdir()) == []  # refused: nothing to tell, nothing kept


def test_a_start_is_retried_through_malformed_answers_and_5xx(tmp_path, raw_server, serving):
    answers = {1: GARBAGE, 2: http(503, {}), 3: http(429, {})}
    answer = once(leased())
    server = raw_server(lambda *a: answer(*a, start=lambda n: answers.get(n, http(200, {"state": "delivered"}))))
    serving(make_agent(tmp_path, server.url))
    wait_for(lambda: server.count("c-1/result/") == 1, timeout=10, what="the result")
    assert server.count("c-1/start/") == 4


def test_the_journal_names_a_command_before_its_start_is_acknowledged(tmp_path, raw_server, serving):
    """An agent killed once its start was accepted but before it ran the command left nothing behind: the platform
    waited for a result until the command's deadline. The entry now comes first."""
    agent = make_agent(tmp_path)
    seen = []
    answer = once(leased(kind="wipe"))

    def look_at_the_journal(n):
        seen.append(agent.journal_read(agent.journal_path("c-1")))
        return http(200, {"state": "delivered"})
    server = raw_server(lambda *a: answer(*a, start=look_at_the_journal))
    agent.server = server.url
    serving(agent)
    wait_for(lambda: server.count("c-1/result/") == 1, timeout=10, what="the result")
    assert seen and seen[0]["kind"] == "wipe" and "starting" in seen[0] and "started" not in seen[0]
    assert seen[0]["lease"] == "lease-c-1"
    wait_for(lambda: list(agent.journal_dir.iterdir()) == [], timeout=5, what="the entry to be forgotten")


def test_a_start_without_an_answer_is_answered_not_run(tmp_path, raw_server, serving):
    """The start acknowledgement got no answer for all of --start-retry-seconds: the platform may have recorded it
    and would wait for a result until the command's deadline. The agent does not run the command and says so."""
    ran, tool = marker_tool(tmp_path)
    answer = once(leased(kind="readiness", payload={"command": "all_reduce_perf -b 8G", "cards": [0]}))
    server = raw_server(lambda *a: answer(*a, start=lambda n: http(503, {})))
    agent = make_agent(tmp_path, server.url, "--readiness-bin", str(tool), "--start-retry-seconds", "0.3")
    serving(agent)
    wait_for(lambda: server.count("c-1/result/") == 1, timeout=10, what="the not-run answer")
    result = server.bodies[[p for _, p in server.hits].index("/api/v1/agent/commands/c-1/result/")]
    assert result["exit_code"] == agent_mod.EXIT_RESTARTED and result["meta"] == {"not_run": True}
    assert result["lease"] == "lease-c-1"  # the hand-out it answers for
    assert "did not run this command (readiness): its start acknowledgement got no answer (503)" in result["output"]
    assert server.count("c-1/start/") >= 2 and not ran.exists()
    wait_for(lambda: list(agent.journal_dir.iterdir()) == [], timeout=5, what="the entry to be forgotten")


def test_a_not_run_answer_the_platform_could_not_take_waits_in_the_journal(tmp_path, raw_server):
    down = raw_server(lambda *a: http(503, {}))
    agent = make_agent(tmp_path, down.url, "--start-retry-seconds", "0.1", "--result-retry-seconds", "0.1")
    assert agent.begin(leased()) is False
    entry = json.loads((agent.journal_dir / "c-1.json").read_text())
    assert entry["result"]["meta"] == {"not_run": True} and down.count("c-1/result/") >= 1
    up = raw_server(lambda *a: http(200, {"state": "done"}))
    make_agent(tmp_path, up.url).journal_recover()
    assert up.count("c-1/result/") == 1 and up.bodies[-1] == entry["result"]
    assert list(agent.journal_dir.iterdir()) == []


def test_an_agent_asked_to_stop_leaves_a_command_it_has_not_started_to_its_lease(tmp_path, raw_server, serving):
    agent = make_agent(tmp_path)
    answer = once(leased())

    def stop_on_poll(method, path, body, hits):  # SIGTERM arrives while the poll is answered
        if "/commands/?" in path:
            agent.stop.set()
        return answer(method, path, body, hits)
    server = raw_server(stop_on_poll)
    agent.server = server.url
    thread = serving(agent)
    thread.join(10)
    assert not thread.is_alive()
    assert server.count("/start/") == 0 and server.count("/result/") == 0  # handed out again after the lease


def test_commands_left_in_the_journal_are_answered_before_the_first_poll(tmp_path, raw_server, serving):
    journal = tmp_path / "state" / "journal"
    journal.mkdir(parents=True)
    # An agent killed while running c-1; one that stopped before it could post c-2's result; one killed while
    # writing c-3's entry.
    (journal / "c-1.json").write_text(json.dumps({"id": "c-1", "kind": "readiness", "started": time.time() - 5}))
    stored = {"exit_code": 0, "output": "done before the stop\n", "duration_s": 1.5, "meta": {}}
    (journal / "c-2.json").write_text(json.dumps({"id": "c-2", "kind": "topology", "result": stored}))
    (journal / "c-3.json.tmp").write_text('{"id": "c-3", "ki')
    # And one killed while acknowledging c-4's start (the platform may have accepted it).
    (journal / "c-4.json").write_text(json.dumps({"id": "c-4", "kind": "wipe", "lease": "lease-c-4",
                                                 "starting": time.time() - 1}))
    server = raw_server(lambda method, path, body, hits: http(200, {"results": []}) if "/commands/?" in path
                        else http(409, {}) if "c-3" in path else http(200, {"state": "done"}))
    agent = make_agent(tmp_path, server.url)
    serving(agent)
    wait_for(lambda: server.count("/commands/?limit=1&lease=1") >= 1, timeout=10, what="the first poll")
    results = {p.split("/")[-3]: server.bodies[i] for i, (_, p) in enumerate(server.hits) if p.endswith("/result/")}
    first_poll = next(i for i, (_, p) in enumerate(server.hits) if "/commands/?" in p)
    assert max(i for i, (_, p) in enumerate(server.hits) if p.endswith("/result/")) < first_poll
    # Before: nothing was said, and the platform waited for each until its deadline.
    assert results["c-1"]["exit_code"] == agent_mod.EXIT_RESTARTED == 75
    assert "the agent restarted while running this command (readiness, started " in results["c-1"]["output"]
    assert results["c-1"]["meta"] == {"agent_restarted": True} and results["c-1"]["duration_s"] >= 5
    assert results["c-2"] == stored
    assert results["c-3"]["exit_code"] == 75 and "(unknown kind, started an unknown time)" in results["c-3"]["output"]
    assert results["c-4"]["exit_code"] == 75 and results["c-4"]["meta"] == {"not_run": True, "agent_restarted": True}
    assert results["c-4"]["lease"] == "lease-c-4"
    assert "did not run this command (wipe): the agent restarted before it ran" in results["c-4"]["output"]
    assert list(journal.iterdir()) == []  # stored, or refused for good (409): forgotten


def _wait_for_environment(pid: int, entry: str, timeout: float = 10) -> None:
    """Until `pid`'s environment shows `entry`. Popen returns once exec has closed the child's error pipe, a moment
    before the kernel sets up the new image's environment: /proc/<pid>/environ reads empty until then, and under a
    loaded suite the agent could look in that moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if entry.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never showed {entry} in its environment")


def test_a_starting_entry_whose_command_left_programs_running_is_answered_as_cut_short(tmp_path, raw_server):
    """The start was accepted and the command ran, but its running entry could not be written (a full disk): the
    entry still says "starting". Its programs found running tell the restart it ran: stopped, and answered as cut
    short, not as never run."""
    journal = tmp_path / "state" / "journal"
    journal.mkdir(parents=True)
    (journal / "c-7.json").write_text(json.dumps({"id": "c-7", "kind": "readiness", "starting": time.time() - 3}))
    left = subprocess.Popen(["sleep", "60"], env={**os.environ, agent_mod.COMMAND_ENV: f"c-7@{journal}"},
                            start_new_session=True)
    try:
        _wait_for_environment(left.pid, f"{agent_mod.COMMAND_ENV}=c-7@{journal}")
        server = raw_server(lambda *a: http(200, {"state": "done"}))
        make_agent(tmp_path, server.url).journal_recover()
        result = server.bodies[-1]
        assert result["exit_code"] == 75 and result["meta"] == {"agent_restarted": True}
        assert "the agent restarted while running this command (readiness, started " in result["output"]
        assert "stopped 1 process(es) it had left running" in result["output"]
        assert left.wait(timeout=10) == -signal.SIGKILL
    finally:
        if left.poll() is None:
            left.kill()


def test_a_result_that_could_not_be_posted_stays_in_the_journal_for_the_next_start(tmp_path, raw_server):
    down = raw_server(lambda *a: http(503, {}))
    agent = make_agent(tmp_path, down.url, "--result-retry-seconds", "0.2")
    agent.execute(leased())
    entry = json.loads((agent.journal_dir / "c-1.json").read_text())
    assert entry["result"]["exit_code"] == 0 and "GPU0" in entry["result"]["output"]
    up = raw_server(lambda *a: http(200, {"state": "done"}))
    make_agent(tmp_path, up.url).journal_recover()
    assert up.count("c-1/result/") == 1 and up.bodies[-1] == entry["result"]
    assert list(agent.journal_dir.iterdir()) == []


def test_a_result_refused_for_a_rotated_token_is_kept_for_the_restart_with_the_new_one(tmp_path, raw_server):
    """An operator rotated the node token while a command ran: its result answers 401. Kept in the journal, the
    agent restarted with the new token posts it (before: the entry was dropped, the result lost)."""
    rotated = raw_server(lambda method, path, body, hits: http(401, {"error": {"code": "token_invalid"}})
                         if path.endswith("/result/") else http(200, {}))
    agent = make_agent(tmp_path, rotated.url)
    agent.execute(leased())
    entry = json.loads((agent.journal_dir / "c-1.json").read_text())
    assert entry["result"]["exit_code"] == 0
    up = raw_server(lambda *a: http(200, {"state": "done"}))
    make_agent(tmp_path, up.url).journal_recover()
    assert up.count("c-1/result/") == 1 and up.bodies[-1] == entry["result"]
    assert list(agent.journal_dir.iterdir()) == []

