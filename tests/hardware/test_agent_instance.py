"""An instance provisioned end to end on an agent node: the API creates it, a real Celery worker process
runs the steps through the agent driver (AgentCommand rows in the database), and the node agent — a
separate process with the `process` runtime, talking HTTP to the live test server — runs them."""
import os

import pytest

from billing.models import Meter
from hardware.models import AgentCommand, NodeCredential
from inventory.models import CardAllocation, Node
from provisioning.models import ReadinessReport
from provisioning.readiness import parse_output
from tests.factories.hardware import agent_node
from tests.factories.inventory import ZoneFactory
from tests.factories.provisioning import container_body, funded, make_fleet, wait_for_state

from .conftest import wait_for

pytestmark = [pytest.mark.pg, pytest.mark.redis, pytest.mark.worker, pytest.mark.timeout(300),
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
    assert release.payload == {"cards": list(range(8)), "instance_id": iid}
    assert f"process {pid} stopped" in release.output
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not (agent.state_dir / "instances" / iid).exists()
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()
    assert not CardAllocation.objects.filter(card__node=node, released_at__isnull=True).exists()
    assert not Meter.objects.filter(instance_id=iid, closed_at__isnull=True).exists()
    node.refresh_from_db()
    assert node.state == "available"  # a container leaves the node in the pool
