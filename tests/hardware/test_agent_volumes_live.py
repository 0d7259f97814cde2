"""Volumes end to end on agent nodes: the API creates instances with volumes, a real Celery worker runs their steps
through the agent driver, and two node agents — separate processes with the `process` runtime, talking HTTP to the
live test server — mount the volumes from one storage root (a directory here; NFS/CephFS in production), on two
nodes of one zone. The stand-in workload (tests/hardware/bin/volume-user) writes to a volume or reads back what is
there."""
import json
import os

import pytest
from django.test import override_settings

from hardware.models import AgentCommand, NodeCredential
from inventory.choices import NodeState
from inventory.models import CardAllocation
from inventory.services import node_set_state
from storage.models import Volume
from tests.factories.hardware import agent_node
from tests.factories.inventory import ZoneFactory
from tests.factories.provisioning import container_body, funded, wait_for_state
from tests.factories.storage import storage_prices

from .conftest import AGENT_PYTHON, BIN, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.timeout(400),
              pytest.mark.django_db(transaction=True)]
URL = "/api/v1/instances/"
GIB = 1024 ** 3


@pytest.fixture
def zone_of_two(tmp_path, live_server, start_agent, start_worker):
    """Zone `zone-vol`: two agent nodes (8 cards each) sharing the storage root tmp_path/root; → (nodes, agents,
    worker, root)."""
    root = tmp_path / "root"
    (root / "volumes").mkdir(parents=True)
    zone = ZoneFactory(slug="zone-vol", name="zone-vol")
    storage_prices(zone)
    nodes, agents = [], []
    for i in range(2):
        node, token = agent_node(hostname=f"gpu-vol-{i}.test", zone=zone)
        agent = start_agent(live_server.url, token, name=f"vol{i}", extra_args=(
            "--process-command", f"{AGENT_PYTHON} {BIN / 'volume-user'}", "--storage-root", str(root),
            "--storage-quota", "none", "--usage-interval", "0", "--hostname", node.hostname))
        nodes.append(node)
        agents.append(agent)
    for node, agent in zip(nodes, agents, strict=True):
        wait_for(lambda n=node: NodeCredential.objects.filter(node=n, registered_at__isnull=False).exists(),
                 timeout=30, what=f"agent registration\n{agent.log_tail()}")
    worker = start_worker(extra_env={"AGENT_COMMAND_POLL_SECONDS": "0.05", "AGENT_COMMAND_TIMEOUT_SECONDS": "60",
                                     "SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0",
                                     "STORAGE_ROOTS": json.dumps({"zone-vol": str(root)})})
    with override_settings(STORAGE_ROOTS={"zone-vol": str(root)}):
        yield nodes, agents, worker, root


def where_on(agent, iid):
    """The instance's state dir on that agent's node (the stand-in workload's working directory)."""
    return agent.state_dir / "instances" / f"cardmix-{iid}-0"


def node_of(iid):
    return CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).values_list(
        "card__node_id", "card__index").first()


def test_a_shared_volume_written_by_one_instance_is_read_back_by_another_on_another_node(
        zone_of_two, member_factory, session_client_for):
    (node_a, node_b), agents, worker, root = zone_of_two
    client = session_client_for(funded(member_factory(role="owner")))
    r = client.post("/api/v1/volumes/", {"name": "ckpt", "kind": "shared", "size_gib": 10, "zone": "zone-vol"},
                    format="json")
    assert r.status_code == 201, r.json()
    vid = r.json()["id"]
    node_set_state(node=node_b, state=NodeState.MAINTENANCE, reason="A goes to node A")

    r = client.post(URL, container_body("h100-sxm-80g", 8, zone="zone-vol", volumes=[{"volume": vid}]), format="json")
    assert r.status_code == 201, r.json()
    a = r.json()["id"]
    wait_for_state(a, "running", timeout=120, worker=worker)
    assert node_of(a)[0] == node_a.pk
    prepare = AgentCommand.objects.get(node=node_a, kind="prepare", payload__instance_id=a)
    assert prepare.payload["storage_root"] == str(root)
    assert prepare.payload["volumes"] == [{"id": vid, "kind": "shared", "dir": f"volumes/{vid}", "mount_path":
                                           "/mnt/ckpt", "read_only": False, "size_bytes": 10 * GIB}]
    wrote = wait_for(lambda: (where_on(agents[0], a) / "wrote-mnt_ckpt.bin").exists()
                     and (where_on(agents[0], a) / "wrote-mnt_ckpt.bin").read_bytes(), timeout=20,
                     what="instance A to write its checkpoint")
    # Its usage reaches the volume through node A's heartbeats.
    wait_for(lambda: Volume.objects.get(pk=vid).usage_gib > 0, timeout=20, what="usage from the heartbeat")
    assert client.get(f"/api/v1/volumes/{vid}/").json()["usage_gib"] not in (0, "0", "0.000")

    assert client.delete(f"{URL}{a}/").status_code == 202
    wait_for_state(a, "terminated", timeout=120, worker=worker)
    assert not where_on(agents[0], a).exists()  # A is gone from its node; the volume stays

    node_set_state(node=node_b, state=NodeState.AVAILABLE, reason="back for the test")
    node_set_state(node=node_a, state=NodeState.MAINTENANCE, reason="B goes to node B")
    r = client.post(URL, container_body("h100-sxm-80g", 8, zone="zone-vol", name="b", volumes=[{"volume": vid}]),
                    format="json")
    assert r.status_code == 201, r.json()
    b = r.json()["id"]
    wait_for_state(b, "running", timeout=120, worker=worker)
    assert node_of(b)[0] == node_b.pk
    read = wait_for(lambda: (where_on(agents[1], b) / "read-mnt_ckpt.bin").exists()
                    and (where_on(agents[1], b) / "read-mnt_ckpt.bin").read_bytes(), timeout=20,
                    what="instance B to read the checkpoint back")
    assert read == wrote and len(read) > 1 << 20  # byte for byte


def test_a_disk_attached_while_stopped_keeps_its_data_on_other_cards_and_grows_without_a_restart(
        zone_of_two, member_factory, session_client_for):
    (node_a, node_b), agents, worker, root = zone_of_two
    client = session_client_for(funded(member_factory(role="owner")))
    node_set_state(node=node_b, state=NodeState.MAINTENANCE, reason="first run on node A")
    r = client.post(URL, container_body("h100-sxm-80g", 8, zone="zone-vol", name="c"), format="json")
    assert r.status_code == 201, r.json()
    c = r.json()["id"]
    wait_for_state(c, "running", timeout=120, worker=worker)
    assert client.post(f"{URL}{c}/stop/", {}, format="json").status_code in (200, 202)
    wait_for_state(c, "stopped", timeout=120, worker=worker)

    r = client.post("/api/v1/volumes/", {"name": "data", "kind": "disk", "size_gib": 10, "zone": "zone-vol"},
                    format="json")
    assert r.status_code == 201, r.json()
    vid = r.json()["id"]
    r = client.post(f"{URL}{c}/volumes/", {"volume": vid}, format="json")
    assert r.status_code in (200, 201), r.json()

    assert client.post(f"{URL}{c}/start/", {}, format="json").status_code in (200, 202)
    wait_for_state(c, "running", timeout=120, worker=worker)
    first = node_of(c)
    wrote = wait_for(lambda: (where_on(agents[0], c) / "wrote-data.bin").exists()
                     and (where_on(agents[0], c) / "wrote-data.bin").read_bytes(), timeout=20,
                     what="the first run to write /data")
    assert client.post(f"{URL}{c}/stop/", {}, format="json").status_code in (200, 202)
    wait_for_state(c, "stopped", timeout=120, worker=worker)

    node_set_state(node=node_b, state=NodeState.AVAILABLE, reason="back for the test")
    node_set_state(node=node_a, state=NodeState.MAINTENANCE, reason="start on other cards")
    assert client.post(f"{URL}{c}/start/", {}, format="json").status_code in (200, 202)
    wait_for_state(c, "running", timeout=120, worker=worker)
    assert node_of(c)[0] == node_b.pk != first[0]  # other cards, on another node
    read = wait_for(lambda: (where_on(agents[1], c) / "read-data.bin").exists()
                    and (where_on(agents[1], c) / "read-data.bin").read_bytes(), timeout=20,
                    what="the second run to read /data")
    assert read == wrote

    pid = AgentCommand.objects.filter(node=node_b, kind="prepare", payload__instance_id=c).latest("created_at").meta[
        "pid"]
    r = client.patch(f"/api/v1/volumes/{vid}/", {"size_gib": 25}, format="json")
    assert r.status_code == 200, r.json()
    grow = wait_for(lambda: AgentCommand.objects.filter(node=node_b, kind="volume_grow", state="done").first(),
                    timeout=30, what=f"the grow on node B\n{agents[1].log_tail()}")
    assert grow.exit_code == 0 and "none detached" in grow.output, grow.output

    def reported():
        facts = NodeCredential.objects.get(node=node_b).facts
        return next((v["size_bytes"] for v in facts.get("volumes", []) if v["id"] == vid), None) == 25 * GIB
    wait_for(reported, timeout=20, what="node B's heartbeat to report the new size")
    os.kill(pid, 0)  # the same workload process still runs: nothing was restarted
    assert AgentCommand.objects.filter(node=node_b, kind="prepare", payload__instance_id=c).count() == 1
