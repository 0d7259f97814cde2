"""An instance provisioned end to end on an agent node: the API creates it, a real Celery worker process
runs the steps through the agent driver (AgentCommand rows in the database), and the node agent — a
separate process with the `process` runtime, talking HTTP to the live test server — runs them."""
import os
import socket

import pytest

from billing.models import Meter
from hardware.models import AgentCommand, NodeCredential
from inventory.models import CardAllocation, Node
from provisioning.models import ReadinessReport
from provisioning.readiness import parse_output
from tests.factories.hardware import agent_node
from tests.factories.inventory import ZoneFactory
from tests.factories.provisioning import container_body, funded, make_fleet, wait_for_state

from .conftest import AGENT_PYTHON, free_port, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.timeout(300),
              pytest.mark.django_db(transaction=True)]
URL = "/api/v1/instances/"
# The worker waits on AgentCommand rows: poll them often, and give up well within the test's time.
WORKER_ENV = {"AGENT_COMMAND_POLL_SECONDS": "0.05", "AGENT_COMMAND_TIMEOUT_SECONDS": "60",
              "SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0"}


def test_instance_on_an_agent_node_runs_and_terminates(live_server, start_agent, start_worker, member_factory,
                                                       session_client_for):
    make_fleet(h100=1)  # a simulated H100 node in another zone: the zone alone must pick the agent node
    zone = ZoneFactory(slug="zone-agent", name="zone-agent")
    node, token = agent_node(hostname="gpu-agent-10.test", zone=zone)
    assert Node.objects.filter(accelerator=node.accelerator).count() == 2
    agent = start_agent(live_server.url, token)
    wait_for(lambda: NodeCredential.objects.filter(node=node, registered_at__isnull=False).exists(),
             timeout=30, what=f"agent registration\n{agent.log_tail()}")
    worker = start_worker(extra_env=WORKER_ENV)
    client = session_client_for(funded(member_factory(role="owner")))

    r = client.post(URL, container_body("h100-sxm-80g", 8, zone="zone-agent"), format="json")
    assert r.status_code == 201, r.json()
    iid = r.json()["id"]
    wait_for_state(iid, "running", timeout=120, worker=worker)
    placed = client.get(f"{URL}{iid}/").json()["nodes"]
    assert [(n["node"], n["cards"]) for n in placed] == [(node.hostname, list(range(8)))]

    # Every step went through the agent, which answered each one.
    kinds = list(AgentCommand.objects.filter(node=node).order_by("created_at").values_list("kind", "state"))
    assert kinds == [("prepare", "done"), ("topology", "done"), ("readiness", "done")], kinds
    prepared = AgentCommand.objects.get(node=node, kind="prepare")
    assert prepared.payload["instance_id"] == iid and prepared.payload["cards"] == list(range(8))
    assert prepared.payload["name"] == f"cardmix-{iid}-0" and prepared.payload["ssh_port"] == 30000
    assert prepared.payload["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    pid = prepared.meta["pid"]
    os.kill(pid, 0)  # the stand-in container is alive

    report = ReadinessReport.objects.get(instance_id=iid)
    readiness = AgentCommand.objects.get(node=node, kind="readiness")
    assert report.raw_output == readiness.output  # exactly what the agent's run printed
    assert "# fake all_reduce_perf argv=" in report.raw_output
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in report.raw_output
    assert "# Avg bus bandwidth" in report.raw_output
    assert report.passed and report.exit_code == 0 and report.tool == "nccl-tests" and report.cards == list(range(8))
    assert report.floor_gbps == float(node.accelerator.readiness_floor_gbps)
    assert report.busbw_largest_gbps >= report.floor_gbps
    assert report.busbw_largest_gbps == pytest.approx(
        parse_output(readiness.output, tool="nccl-tests", ranks=8).busbw_largest_gbps)
    assert "NV18" in report.topology
    meters = list(Meter.objects.filter(instance_id=iid, closed_at__isnull=True))
    assert [(m.cards, m.accelerator) for m in meters] == [(8, "h100-sxm-80g")]
    assert CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True, card__node=node).count() == 8

    assert client.delete(f"{URL}{iid}/").status_code == 202
    inst = wait_for_state(iid, "terminated", timeout=120, worker=worker)
    assert inst.terminated_at is not None
    release = AgentCommand.objects.get(node=node, kind="release")
    assert release.state == "done" and release.exit_code == 0, release.output
    assert release.payload == {"cards": list(range(8)), "instance_id": iid, "name": f"cardmix-{iid}-0"}
    assert f"process {pid} stopped" in release.output
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not (agent.state_dir / "instances" / f"cardmix-{iid}-0").exists()
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()
    assert not CardAllocation.objects.filter(card__node=node, released_at__isnull=True).exists()
    assert not Meter.objects.filter(instance_id=iid, closed_at__isnull=True).exists()
    node.refresh_from_db()
    assert node.state == "available"  # a container leaves the node in the pool


# Stands in for a container's sshd: listens on the port the platform published it on and says who it is.
SSHD_STUB = """
import os, socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(os.environ["CARDMIX_SSH_PORT"])))
s.listen()
while True:
    conn, _ = s.accept()
    conn.sendall(("SSH-2.0-stub cards=" + os.environ["CUDA_VISIBLE_DEVICES"] + "\\r\\n").encode())
    conn.close()
"""


def _port_base() -> int:
    """A base whose +0 and +4 are free loopback ports (the two containers' first cards)."""
    while True:
        base = free_port()
        if base > 65471:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", base + 4))
            return base
        except OSError:
            continue


def _banner(host: str, port: int) -> str:
    with socket.create_connection((host, port), timeout=5) as conn:
        return conn.recv(100).decode()


def test_two_containers_of_one_instance_on_one_node_each_answer_on_their_own_port(
        live_server, start_agent, start_worker, member_factory, session_client_for, settings, tmp_path):
    base = _port_base()
    settings.CONTAINER_SSH_PORT_BASE = base  # the live server's API bodies
    zone = ZoneFactory(slug="zone-agent", name="zone-agent")
    node, token = agent_node(hostname="gpu-agent-11.test", zone=zone, ssh_host="127.0.0.1")
    stub = tmp_path / "sshd_stub.py"
    stub.write_text(SSHD_STUB)
    agent = start_agent(live_server.url, token, extra_args=("--process-command", f"{AGENT_PYTHON} {stub}"))
    wait_for(lambda: NodeCredential.objects.filter(node=node, registered_at__isnull=False).exists(),
             timeout=30, what=f"agent registration\n{agent.log_tail()}")
    worker = start_worker(extra_env={**WORKER_ENV, "CONTAINER_SSH_PORT_BASE": str(base)})
    client = session_client_for(funded(member_factory(role="owner")))

    body = {**container_body("h100-sxm-80g", 4, zone="zone-agent"),
            "items": [{"accelerator": "h100-sxm-80g", "count": 4}, {"accelerator": "h100-sxm-80g", "count": 4}]}
    r = client.post(URL, body, format="json")
    assert r.status_code == 201, r.json()
    iid = r.json()["id"]
    wait_for_state(iid, "running", timeout=120, worker=worker)
    got = client.get(f"{URL}{iid}/").json()
    assert sorted(tuple(n["cards"]) for n in got["nodes"]) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert {n["node"] for n in got["nodes"]} == {node.hostname}
    ssh = sorted((e["host"], e["port"]) for e in got["ssh"])
    assert ssh == [("127.0.0.1", base), ("127.0.0.1", base + 4)]  # one entry per container, not per node
    # Each endpoint the API hands out reaches that container's own sshd (before: the second prepare of
    # the same instance on the node replaced the first container, and both shared one port).
    assert _banner("127.0.0.1", base).startswith("SSH-2.0-stub cards=0,1,2,3")
    assert _banner("127.0.0.1", base + 4).startswith("SSH-2.0-stub cards=4,5,6,7")
    prepares = AgentCommand.objects.filter(node=node, kind="prepare").order_by("created_at")
    assert sorted(c.payload["name"] for c in prepares) == [f"cardmix-{iid}-0", f"cardmix-{iid}-4"]
    pids = [c.meta["pid"] for c in prepares]
    for pid in pids:
        os.kill(pid, 0)

    assert client.delete(f"{URL}{iid}/").status_code == 202
    wait_for_state(iid, "terminated", timeout=120, worker=worker)
    for pid in pids:
        wait_for(lambda pid=pid: not _alive(pid), timeout=10, what=f"process {pid} to stop")
    assert not list((agent.state_dir / "instances").glob(f"cardmix-{iid}-*"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
