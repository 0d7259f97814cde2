"""Volume usage from heartbeats: the agent API takes each mounted volume's usage and size, and storage records it on
the volumes of the node's own zone only (a node cannot write another zone's figures); over its size is flagged."""
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from hardware.models import NodeCredential
from tests.factories.billing import fund
from tests.factories.hardware import agent_node
from tests.factories.inventory import ZoneFactory
from tests.factories.storage import make_volume
from tests.factories.tenancy import OrganizationFactory

pytestmark = pytest.mark.django_db
GIB = 1024 ** 3
HEARTBEAT = {"agent_version": "1.5.0", "hostname": "h", "runtime": "process"}


def beat(secret, volumes):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client.post("/api/v1/agent/heartbeat/", {**HEARTBEAT, "volumes": volumes}, format="json")


def test_usage_lands_on_the_nodes_zone_volumes_only():
    org = OrganizationFactory()
    fund(org, 1_000_000_000, key="volume-usage")
    here, there = ZoneFactory(slug="zone-here"), ZoneFactory(slug="zone-there")
    node, secret = agent_node(hostname="gpu-usage.test", zone=here)
    mine = make_volume(org, here, name="mine", size_gib=10)
    theirs = make_volume(org, there, name="theirs", size_gib=10)
    r = beat(secret, [
        {"id": str(mine.pk), "used_bytes": 12 * GIB + GIB // 2, "size_bytes": 10 * GIB, "quota": "none",
         "over_quota": True},
        {"id": str(theirs.pk), "used_bytes": 5 * GIB, "size_bytes": 10 * GIB},
        {"id": "not-a-uuid", "used_bytes": 1},
    ])
    assert r.status_code == 200, r.json()
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.usage_gib == Decimal("12.500") and mine.over_quota and mine.usage_reported_at is not None
    assert theirs.usage_gib == 0 and theirs.usage_reported_at is None  # another zone's: ignored
    assert NodeCredential.objects.get(node=node).facts["volumes"][0]["used_bytes"] == 12 * GIB + GIB // 2

    assert beat(secret, [{"id": str(mine.pk), "used_bytes": GIB, "size_bytes": 10 * GIB}]).status_code == 200
    mine.refresh_from_db()
    assert mine.usage_gib == Decimal("1.000") and not mine.over_quota  # the platform's size decides


@pytest.mark.parametrize("entry", [{"id": "x", "used_bytes": -1}, {"id": "x"}, {"id": "x", "used_bytes": 1,
                                                                                "quota": "zfs"}])
def test_a_malformed_volume_entry_is_a_400(entry):
    _, secret = agent_node(hostname="gpu-usage-bad.test")
    r = beat(secret, [entry])
    assert r.status_code == 400 and r.json()["error"]["code"] == "validation_error"
    assert "volumes" in r.json()["error"]["details"]


def test_a_deleted_volume_is_removed_by_one_agent_of_its_zone(django_capture_on_commit_callbacks):
    from hardware.models import AgentCommand
    from storage.services import volume_delete

    org = OrganizationFactory()
    fund(org, 1_000_000_000, key="volume-delete")
    zone = ZoneFactory(slug="zone-del")
    node, secret = agent_node(hostname="gpu-del.test", zone=zone)
    assert beat(secret, []).status_code == 200  # registered
    other, _ = agent_node(hostname="gpu-del-unregistered.test", zone=zone)
    volume = make_volume(org, zone, name="gone", size_gib=3)
    with django_capture_on_commit_callbacks(execute=True):
        volume_delete(org=org, volume_id=volume.pk)
    [command] = AgentCommand.objects.filter(kind="volume_delete")
    assert command.node_id == node.pk  # the registered agent, not the silent one
    assert command.payload == {"volume_id": str(volume.pk), "dir": f"volumes/{volume.pk}",
                               "storage_root": "/mnt/cardmix-storage", "size_bytes": 3 * GIB}
