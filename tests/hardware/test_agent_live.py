"""The node agent as a separate OS process against the live test server (process runtime, fake device
tools printing real formats, a recorded nccl-tests run as the readiness binary)."""
import http.client as http_client
import os
import signal
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from core.dbclock import db_now
from hardware.models import AgentCommand, NodeCredential
from hardware.selectors import unreachable_instance_ids
from hardware.services import agent_command_enqueue, heartbeats_check
from inventory.choices import NodeState
from inventory.models import Card, CardAllocation
from inventory.services import node_set_state
from provisioning.drivers import get_driver
from provisioning.readiness import evaluate, parse_device_health, parse_output
from provisioning.services.cleaning import node_clean
from provisioning.services.fleet import node_ref
from tenancy.models import AuditEvent
from tests.factories.hardware import agent_node
from tests.races import Aside

from .conftest import BIN, RawServer, heartbeats_settled, http, wait_for

pytestmark = [pytest.mark.django_db(transaction=True)]


def registered(node):
    return NodeCredential.objects.filter(node=node, registered_at__isnull=False).first()


def ref_of(node):
    return node_ref(node)


def test_agent_registers_runs_commands_and_goes_unreachable(live_server, start_agent):
    node, token = agent_node(hostname="gpu-agent-01.test")
    agent = start_agent(live_server.url, token)
    cred = wait_for(lambda: registered(node), timeout=30, what=f"registration\n{agent.log_tail()}")
    assert cred.runtime == "process" and cred.agent_version
    assert [d["index"] for d in cred.facts["devices"]] == list(range(8))
    assert cred.facts["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert cred.facts["driver_versions"] == {"nvidia": "550.90.07"}
    assert cred.heartbeat_deadline > db_now()

    driver = get_driver("agent", poll_s=0.05, timeout_s=30)
    ref = ref_of(node)
    prepared = driver.prepare(ref, [0, 1, 2, 3, 4, 5, 6, 7], kind="container", image="pytorch-2.3-cuda12.3",
                              ssh_keys=["ssh-ed25519 AAAAC3Nza test@cardmix"], env={"NCCL_DEBUG": "WARN"},
                              instance_id="11111111-2222-3333-4444-555555555555")
    assert prepared.exit_code == 0, prepared.text
    assert "process " in prepared.text and "devices 0,1,2,3,4,5,6,7" in prepared.text
    assert prepared.meta["pid"] > 0

    out = driver.readiness(ref, list(range(8)))
    assert out.exit_code == 0, out.text
    assert out.meta["tool"] == "nccl-tests"
    assert "argv=['-b', '8G', '-e', '8G', '-f', '2', '-g', '8', '-c', '1']" in out.text
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in out.text
    parsed = parse_output(out.text, tool=out.meta["tool"], ranks=8)
    verdict = evaluate(parsed, float(node.accelerator.readiness_floor_gbps), out.exit_code)
    assert verdict.passed, verdict.reasons
    assert parsed.busbw_largest_gbps == pytest.approx(430.69, abs=0.5)

    health = driver.health_check(ref, 3)
    assert parse_device_health(health.text, health.exit_code).healthy, health.text
    assert "NV18" in driver.topology(ref).text
    released = driver.release(ref, list(range(8)), instance_id="11111111-2222-3333-4444-555555555555")
    assert released.exit_code == 0 and "stopped" in released.text
    assert set(AgentCommand.objects.filter(node=node).values_list("state", flat=True)) == {"done"}

    # An instance holds a card; then the agent dies.
    holder = "99999999-8888-7777-6666-555555555555"
    CardAllocation.objects.create(card=Card.objects.get(node=node, index=0), holder_id=holder)
    agent.kill(signal.SIGKILL)
    heartbeats_settled(node)  # one sent just before the kill would move the deadline back after the test's update
    assert heartbeats_check() == []  # the deadline has not passed yet
    NodeCredential.objects.filter(node=node).update(heartbeat_deadline=db_now() - timedelta(seconds=1))
    assert heartbeats_check() == [node.hostname]
    node.refresh_from_db()
    assert node.state == NodeState.UNREACHABLE and node.state_reason.startswith("agent heartbeat missed")
    flagged = AuditEvent.objects.get(action="instance.node_unreachable")
    assert flagged.target_id == holder and flagged.details["hostname"] == node.hostname
    assert {str(i) for i in unreachable_instance_ids()} == {holder}
    assert heartbeats_check() == []  # already marked: nothing new

    # A command for a dead agent ends in a clean timeout, not a hang.
    late = get_driver("agent", poll_s=0.05, timeout_s=0.5).topology(ref)
    assert late.exit_code == 124 and "did not answer" in late.text

    # The agent comes back: the node returns to the pool.
    start_agent(live_server.url, token, name="again")
    wait_for(lambda: node.__class__.objects.get(pk=node.pk).state == NodeState.AVAILABLE, timeout=30,
             what="the node to return to available")


def test_node_cleaning_through_the_agent(live_server, start_agent):
    node, token = agent_node(hostname="gpu-agent-02.test")
    start_agent(live_server.url, token)
    wait_for(lambda: registered(node), timeout=30, what="registration")
    from django.test import override_settings

    with override_settings(AGENT_COMMAND_POLL_SECONDS=0.05):
        node_set_state(node=node, state=NodeState.CLEANING, reason="cleaning after a bare-metal instance")
        cleaned = node_clean(node=node, previous_state=NodeState.AVAILABLE)
    assert cleaned.state == NodeState.AVAILABLE, cleaned.state_reason
    assert "disks wiped, 8 card(s) healthy" in cleaned.state_reason
    wipe = AgentCommand.objects.get(node=node, kind="wipe")
    assert wipe.exit_code == 0 and "successfully reset" in wipe.output
    assert AgentCommand.objects.filter(node=node, kind="health_check", exit_code=0).count() == 8
    steps = list(AuditEvent.objects.filter(target_id=str(node.pk), action__in=["node.cleaning", "node.available"])
                 .order_by("created_at").values_list("action", flat=True))
    assert steps == ["node.cleaning", "node.available"]


def test_cleaning_failure_keeps_the_node_out_of_the_pool(live_server, start_agent):
    node, token = agent_node(hostname="gpu-agent-03.test")
    # No nvidia-smi on this "host": the accelerator reset in the wipe fails with exit 127.
    start_agent(live_server.url, token, extra_args=("--nvidia-smi", "/nonexistent/nvidia-smi"))
    wait_for(lambda: registered(node), timeout=30, what="registration")
    from django.test import override_settings

    with override_settings(AGENT_COMMAND_POLL_SECONDS=0.05):
        node_set_state(node=node, state=NodeState.CLEANING, reason="cleaning after a bare-metal instance")
        cleaned = node_clean(node=node, previous_state=NodeState.AVAILABLE)
    assert cleaned.state == NodeState.MAINTENANCE
    assert cleaned.state_reason.startswith("cleaning failed: wipe failed (exit 127)")
    assert "nvidia-smi: command not found" in cleaned.state_reason
    assert registered(node).facts["health"] == "degraded"


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie its new parent has not reaped yet counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _kill_runs(runs) -> None:
    """The stand-in tool's process groups (one pid per line in `runs`): a killed agent leaves them running."""
    for pid in runs.read_text().split() if runs.exists() else []:
        try:
            os.killpg(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_an_agent_restarted_mid_queue_runs_what_it_had_not_started_and_nothing_twice(live_server, start_agent,
                                                                                     tmp_path):
    node, token = agent_node(hostname="gpu-agent-04.test")
    runs = tmp_path / "runs"
    slow = tmp_path / "all_reduce_perf"  # the first command: still running when the agent is killed
    slow.write_text(f"#!/bin/sh\necho $$ >> {runs}\nsleep 60\n")
    slow.chmod(0o755)
    first = agent_command_enqueue(node_id=node.pk, kind="readiness", timeout_s=600,
                                  payload={"command": "all_reduce_perf -b 8G", "cards": [0], "collective": "nccl"})
    rest = [agent_command_enqueue(node_id=node.pk, kind="topology", payload={}, timeout_s=600) for _ in range(2)]
    agent = start_agent(live_server.url, token, extra_args=("--readiness-bin", str(slow)))
    try:
        wait_for(runs.exists, timeout=30, what=f"the first command to start\n{agent.log_tail()}")
        agent.kill(signal.SIGKILL)  # a crash, an upgrade, a reboot
        # Before: the agent had claimed all three; the two it never started stayed delivered until their deadline.
        assert set(AgentCommand.objects.filter(pk__in=[c.pk for c in rest]).values_list("state", flat=True)) == {
            "queued"}
        again = start_agent(live_server.url, token, state_dir=agent.state_dir)
        wait_for(lambda: AgentCommand.objects.filter(pk__in=[c.pk for c in rest], state="done").count() == 2,
                 timeout=30, what=f"the commands it had not started\n{again.log_tail()}")
        assert "GPU0" in AgentCommand.objects.get(pk=rest[1].pk).output
        answered = AgentCommand.objects.get(pk=first.pk)  # it started: answered as cut short, never run again
        assert answered.state == "done" and answered.exit_code == 75 and answered.started_at is not None
        assert len(runs.read_text().split()) == 1
    finally:
        _kill_runs(runs)


# The killed agent's last poll may still be answered by a live-server thread after the test queues the next prepare:
# handed to the dead agent under a lease, the prepare comes back when the lease runs out (short here, within the
# driver's 30 s).
@override_settings(AGENT_COMMAND_LEASE_SECONDS=5)
def test_bare_metal_through_the_agent_gives_the_host_back_with_the_operators_own_keys(live_server, start_agent,
                                                                                      tmp_path):
    """Docker runtime (the fake CLI), root's authorized_keys in a temporary dir: prepares (a retry, a second
    tenant's after an agent restart with no release between), a release, then one more and a wipe."""
    node, token = agent_node(hostname="bm-agent-05.test")
    operators = b"# ops\r\nssh-ed25519 AAAAops operator@bastion\nssh-rsa AAAAB3 backup-key"  # no final newline
    root_keys = tmp_path / "root" / ".ssh" / "authorized_keys"
    root_keys.parent.mkdir(parents=True, mode=0o700)
    root_keys.write_bytes(operators)
    root_keys.chmod(0o600)
    (tmp_path / "docker").mkdir()
    options = {"extra_env": {"CARDMIX_FAKE_DOCKER_STATE": str(tmp_path / "docker" / "containers.json")},
               "extra_args": ("--runtime", "docker", "--docker", str(BIN / "docker"), "--authorized-keys",
                              str(root_keys), "--state-dir", str(tmp_path / "bare-metal-state"))}
    agent = start_agent(live_server.url, token, **options)
    wait_for(lambda: registered(node), timeout=30, what=f"registration\n{agent.log_tail()}")
    driver = get_driver("agent", poll_s=0.05, timeout_s=30)
    ref = ref_of(node)

    def prepare(instance_id, key):
        out = driver.prepare(ref, list(range(8)), kind="bare_metal", image="ubuntu-22.04", ssh_keys=[key],
                             env={"NCCL_DEBUG": "WARN"}, instance_id=instance_id)
        assert out.exit_code == 0, out.text
        assert root_keys.read_text() == key + "\n" and root_keys.stat().st_mode & 0o777 == 0o600
        return out

    first, second, third = (f"{n}{n}{n}{n}{n}{n}{n}{n}-0000-0000-0000-000000000000" for n in (1, 2, 3))
    prepare(first, "ssh-ed25519 AAAA tenant-one")
    prepare(first, "ssh-ed25519 AAAA tenant-one")  # retried
    agent.kill(signal.SIGKILL)
    start_agent(live_server.url, token, name="again", **options)  # the same state dir
    prepare(second, "ssh-ed25519 BBBB tenant-two")  # before: the release's "original" would be tenant one's keys
    released = driver.release(ref, [], instance_id=second)
    assert released.exit_code == 0, released.text
    assert root_keys.read_bytes() == operators  # before: an empty file, the operator locked out of root

    prepare(third, "ssh-ed25519 CCCC tenant-three")
    wiped = driver.wipe(ref)  # node cleaning: the third instance's release never came
    assert wiped.exit_code == 0 and "the operator's" in wiped.text and "restored" in wiped.text, wiped.text
    assert root_keys.read_bytes() == operators and root_keys.stat().st_mode & 0o777 == 0o600
    assert not list((tmp_path / "bare-metal-state" / "original-authorized-keys").iterdir())


def test_an_agent_killed_while_running_a_command_answers_it_when_restarted(live_server, start_agent, tmp_path):
    node, token = agent_node(hostname="gpu-agent-05.test")
    runs = tmp_path / "runs"
    slow = tmp_path / "all_reduce_perf"  # still running when the agent is killed
    slow.write_text(f"#!/bin/sh\necho $$ >> {runs}\nsleep 60\n")
    slow.chmod(0o755)
    agent = start_agent(live_server.url, token, extra_args=("--readiness-bin", str(slow)))
    waiting = Aside(lambda: get_driver("agent", poll_s=0.05, timeout_s=300).readiness(ref_of(node), [0, 1]))
    try:
        wait_for(runs.exists, timeout=30, what=f"the readiness test to start\n{agent.log_tail()}")
        agent.kill(signal.SIGKILL)  # systemd's stop timeout, the OOM killer, a crash
        assert [p.suffix for p in (agent.state_dir / "journal").iterdir()] == [".json"]  # it names the command
        # Before: the restarted agent knew nothing of it; the driver waited the whole command timeout.
        again = start_agent(live_server.url, token, state_dir=agent.state_dir,
                            extra_args=("--readiness-bin", str(slow)))
        out = waiting.result(60)
        assert out.exit_code == 75, f"{out.text}\n{again.log_tail()}"
        assert "the agent restarted while running this command (readiness" in out.text
        assert out.meta["agent_restarted"] is True
        # Before: its all_reduce_perf ran on (it outlived the agent in its own session), holding the cards.
        assert "stopped 2 process(es) it had left running" in out.text  # the tool's sh and its sleep
        wait_for(lambda: not _alive(int(runs.read_text().split()[0])), timeout=10, what="the tool to be stopped")
        wait_for(lambda: not list((agent.state_dir / "journal").iterdir()), timeout=10, what="the entry to go")
        assert len(runs.read_text().split()) == 1  # not run again
    finally:
        _kill_runs(runs)


def test_a_command_claimed_but_never_started_is_handed_out_again_and_run(live_server, start_agent):
    node, token = agent_node(hostname="gpu-agent-06.test")
    with override_settings(AGENT_COMMAND_LEASE_SECONDS=2):
        waiting = Aside(lambda: get_driver("agent", poll_s=0.05, timeout_s=300).topology(ref_of(node)))
        cmd = wait_for(lambda: AgentCommand.objects.filter(node=node).first(), timeout=10, what="the command")
        # An agent took it and died before starting it, or the poll's answer was lost on the network.
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        lost = client.get("/api/v1/agent/commands/?limit=1&lease=1").json()["results"]
        assert [c["id"] for c in lost] == [str(cmd.pk)]
        agent = start_agent(live_server.url, token)
        # Before: delivered for good; the agent was never handed it and the driver waited out its timeout.
        out = waiting.result(60)
    assert out.exit_code == 0 and "NV18" in out.text, f"{out.text}\n{agent.log_tail()}"
    row = AgentCommand.objects.get(pk=cmd.pk)
    assert row.state == "done" and row.started_at is not None


def losing_start_answers(server_url: str, token: str) -> RawServer:
    """A proxy to the live server that passes every request on, and every answer back but a start's: the platform
    records the start, the agent never hears so (a network cut, a proxy timing out)."""
    host, port = server_url.split("//")[1].split(":")

    def relay(method, path, body, hits):
        conn = http_client.HTTPConnection(host, int(port), timeout=30)
        conn.request(method, path, body=body or None,
                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        answer = conn.getresponse()
        data = answer.read()
        conn.close()
        if path.endswith("/start/"):
            return b""  # the connection closes without an answer
        return http(answer.status, data)
    return RawServer(relay)


def test_a_start_whose_answer_is_lost_ends_the_drivers_wait_at_once(live_server, start_agent):
    node, token = agent_node(hostname="gpu-agent-07.test")
    proxy = losing_start_answers(live_server.url, token)
    try:
        waiting = Aside(lambda: get_driver("agent", poll_s=0.05, timeout_s=300).topology(ref_of(node)))
        agent = start_agent(proxy.url, token, extra_args=("--start-retry-seconds", "1"))
        # Before: the agent did not run it and said nothing; the driver waited out the command's timeout.
        out = waiting.result(60)
    finally:
        proxy.close()
    assert out.exit_code == 75 and out.meta["not_run"] is True, f"{out.text}\n{agent.log_tail()}"
    assert "did not run this command (topology): its start acknowledgement got no answer" in out.text
    row = AgentCommand.objects.get(node=node)
    assert row.state == "done" and row.started_at is not None and proxy.count("/start/") >= 1
