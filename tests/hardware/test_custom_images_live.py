"""Custom images end to end: a real registry on loopback (Debian's docker-registry, htpasswd), the live test server,
a real Celery worker and the node agent as its own process with the docker runtime (the fake docker CLI, whose pull
and push are real registry clients).

An organization registers its private image with a pull login and creates an instance of it: the agent pulls it
with that login (sealed in the command row, presented to the registry, gone from the node after the pull). Then
"Save as image": the node commits and pushes the container to the operator's registry under the organization's
namespace, the registry truly holds it, the platform reads its size back and bills it as storage (the zone's disk
price per GiB-hour); deleting the image closes its meter."""
import hashlib
import json
import os
from pathlib import Path

import pytest

from billing.models import Meter
from hardware.models import AgentCommand, NodeCredential
from inventory.models import CustomImage
from tenancy.models import AuditEvent
from tests.factories.hardware import agent_node
from tests.factories.inventory import ZoneFactory
from tests.factories.provisioning import container_body, funded, make_fleet, wait_for_state
from tests.factories.storage import DISK_PRICE, storage_prices
from tests.registry_server import AVAILABLE, PASSWORD, USER, RegistryServer

from .conftest import BIN, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.timeout(300),
              pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(not AVAILABLE, reason="needs docker-registry and apache2-utils")]


@pytest.fixture
def registry(tmp_path):
    server = RegistryServer(tmp_path / "registry")
    yield server
    server.stop()


def test_a_private_image_runs_with_its_login_and_a_container_is_saved_and_billed(
        live_server, start_agent, start_worker, member_factory, token_client_for, settings, registry, docker):
    host = registry.host
    saving = {"IMAGE_SAVE_REGISTRY": host, "IMAGE_SAVE_REGISTRY_USERNAME": USER,
              "IMAGE_SAVE_REGISTRY_PASSWORD": PASSWORD, "CUSTOM_IMAGE_INSECURE_REGISTRIES": host}
    for key, value in saving.items():  # the live server's (the worker gets them in its environment)
        setattr(settings, key, [value] if key == "CUSTOM_IMAGE_INSECURE_REGISTRIES" else value)
    make_fleet(h100=1)  # a simulated node elsewhere: the zone picks the agent node
    zone = ZoneFactory(slug="zone-agent", name="zone-agent")
    storage_prices(zone)
    node, token = agent_node(hostname="gpu-images-01.test", zone=zone)
    agent = start_agent(live_server.url, token, extra_args=("--runtime", "docker", "--docker", str(BIN / "docker")))
    wait_for(lambda: NodeCredential.objects.filter(node=node, registered_at__isnull=False).exists(),
             timeout=30, what=f"agent registration\n{agent.log_tail()}")
    worker = start_worker(extra_env={"AGENT_COMMAND_POLL_SECONDS": "0.05", "AGENT_COMMAND_TIMEOUT_SECONDS": "60",
                                     "SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0", **saving})
    owner = funded(member_factory(role="owner"))
    org = owner.organization
    client = token_client_for(owner)

    # Register the organization's private image: its registry wants the login.
    digest, _ = registry.push("team/trainer", "1.0")
    r = client.post("/api/v1/custom-images/", {"name": "trainer", "reference": f"{host}/team/trainer:1.0",
                                               "username": USER, "password": PASSWORD}, format="json")
    assert r.status_code == 201, r.json()
    image_id = r.json()["id"]

    # An instance of it: the agent pulls it, pinned to the digest, with the login.
    r = client.post("/api/v1/instances/", container_body("h100-sxm-80g", 1, zone="zone-agent", image=image_id),
                    format="json")
    assert r.status_code == 201, r.json()
    iid = r.json()["id"]
    wait_for_state(iid, "running", timeout=120, worker=worker)
    prepare = AgentCommand.objects.get(node=node, kind="prepare")
    assert prepare.payload["image"] == f"{host}/team/trainer:1.0@{digest}"
    assert prepare.payload["registry_auth"]["username"] == USER and PASSWORD not in str(prepare.payload)
    assert f"pulled {host}/team/trainer:1.0@{digest}" in prepare.output and PASSWORD not in prepare.output
    [pull] = [p for p in _log(docker, "pulls.log")]
    assert pull["user"] == USER and pull["password_sha256"] == hashlib.sha256(PASSWORD.encode()).hexdigest()
    assert not os.path.exists(pull["docker_config"])
    assert PASSWORD not in agent.log_tail(100_000)

    # Save as image → the operator's registry, the organization's namespace.
    r = client.post(f"/api/v1/instances/{iid}/save-image/", {"name": "my-model", "tag": "v1"}, format="json")
    assert r.status_code == 202, r.json()
    saved_id = r.json()["id"]
    assert r.json()["state"] == "saving" and r.json()["reference"] == f"{host}/{org.slug}/my-model:v1"
    saved = wait_for(lambda: CustomImage.objects.filter(pk=saved_id).exclude(state="saving").first(), timeout=90,
                     what=f"the save\n{worker.log_tail()}")
    assert saved.state == "ready", saved.state_reason
    in_registry = registry.manifest(f"{org.slug}/my-model", "v1")
    assert in_registry.status_code == 200
    assert saved.digest == in_registry.headers["Docker-Content-Digest"]
    manifest = in_registry.json()
    assert saved.size_bytes == manifest["config"]["size"] + sum(layer["size"] for layer in manifest["layers"]) > 0
    save_cmd = AgentCommand.objects.get(node=node, kind="image_save")
    assert save_cmd.payload["container"] == f"cardmix-{iid}-0" and PASSWORD not in str(save_cmd.payload)
    body = client.get(f"/api/v1/custom-images/{saved_id}/").json()
    assert (body["origin"], body["size_bytes"], body["source_instance_id"]) == ("saved", saved.size_bytes, iid)
    meter = Meter.objects.get(instance_id=saved_id, closed_at__isnull=True)
    assert (meter.subject, meter.cards, meter.rate, meter.accelerator) == ("image", 1, DISK_PRICE, "image:saved")
    assert AuditEvent.objects.filter(action="custom_image.saved", organization=org).exists()

    # It runs like any private image of the organization, then is deleted: its meter closes.
    r = client.post("/api/v1/instances/", container_body("h100-sxm-80g", 1, zone="zone-agent", image=saved_id),
                    format="json")
    assert r.status_code == 201, r.json()
    assert client.delete(f"/api/v1/custom-images/{saved_id}/").status_code == 204
    assert Meter.objects.get(pk=meter.pk).closed_at is not None


def test_save_as_image_is_refused_for_bare_metal_and_stopped_instances(member_factory, token_client_for, settings):
    from tests.factories.provisioning import InstanceFactory

    settings.IMAGE_SAVE_REGISTRY = "registry.example.com"
    owner = member_factory(role="owner")
    client = token_client_for(owner)
    bare = InstanceFactory(organization=owner.organization, kind="bare_metal", state="running")
    stopped = InstanceFactory(organization=owner.organization, state="stopped")
    for inst, says in ((bare, "container instances only"), (stopped, "while it runs")):
        r = client.post(f"/api/v1/instances/{inst.pk}/save-image/", {"name": "x"}, format="json")
        assert r.status_code == 409 and says in r.json()["error"]["message"], r.json()
    other = InstanceFactory(state="running")
    assert client.post(f"/api/v1/instances/{other.pk}/save-image/", {"name": "x"}, format="json").status_code == 404
    settings.IMAGE_SAVE_REGISTRY = ""
    running = InstanceFactory(organization=owner.organization, state="running")
    r = client.post(f"/api/v1/instances/{running.pk}/save-image/", {"name": "x"}, format="json")
    assert r.status_code == 409 and "IMAGE_SAVE_REGISTRY" in r.json()["error"]["message"]
    assert not CustomImage.objects.exists()


def _log(docker, name):
    path = Path(os.environ["CARDMIX_FAKE_DOCKER_STATE"]).parent / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
