"""Every reconciler path that frees a bare-metal placement sends its nodes to `cleaning` first.

(Like the worker's release: a node never returns to the pool with the previous tenant's disks.)
"""
from datetime import timedelta
from unittest import mock

import pytest

from core.dbclock import db_now
from core.models import OutboxMessage
from inventory.models import CardAllocation, Node
from provisioning.drivers.simulated import SimulatedDriver
from provisioning.models import Instance, InstanceEvent, NodeGroup
from provisioning.services.reconciler import reconcile
from provisioning.tasks import instance_advance
from tests.factories.provisioning import container_body, make_fleet

pytestmark = pytest.mark.django_db
URL = "/api/v1/instances/"


def _running(client, kind="bare_metal", count=16) -> str:
    r = client.post(URL, {**container_body("h100-sxm-80g", count), "kind": kind}, format="json")
    assert r.status_code == 201, r.json()
    assert instance_advance(r.json()["id"]) == "running"
    return r.json()["id"]


def _stuck(iid) -> None:
    """Past its step deadline with every re-dispatch used (the worker that should finish it is gone)."""
    Instance.objects.filter(pk=iid).update(step_retries=2, step_deadline=db_now() - timedelta(hours=1))


def _bmc_down(self, *args, **kwargs):
    raise RuntimeError("BMC unreachable")


def _assert_cleaning(iid) -> None:
    nodes = list(Node.objects.order_by("pk"))
    assert [n.state for n in nodes] == ["cleaning"] * len(nodes)
    assert sorted(OutboxMessage.objects.filter(task="provisioning.node_clean").values_list("args", flat=True)) == \
        sorted([[str(n.pk), "available"] for n in nodes])  # the wipe is queued, once per node
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()
    assert not NodeGroup.objects.filter(instance_id=iid, released_at__isnull=True).exists()


@pytest.mark.parametrize("action", ["delete", "stop"])
def test_forced_terminate_or_stop_of_bare_metal_cleans_the_nodes(client, action):
    make_fleet(h100=2)
    iid = _running(client)
    if action == "delete":
        assert client.delete(f"{URL}{iid}/").status_code == 202
    else:
        assert client.post(f"{URL}{iid}/stop/").status_code == 202
    _stuck(iid)
    assert reconcile()["forced"] == 1
    assert Instance.objects.get(pk=iid).state == ("terminated" if action == "delete" else "stopped")
    _assert_cleaning(iid)


def test_failed_bare_metal_whose_driver_release_fails_still_cleans_the_nodes(client):
    make_fleet(h100=2)
    iid = _running(client)
    Instance.objects.filter(pk=iid).update(state="checking")  # as if stuck re-checking
    _stuck(iid)
    with mock.patch.object(SimulatedDriver, "release", _bmc_down):
        assert reconcile()["failed"] == 1
    _assert_cleaning(iid)


def test_leaked_bare_metal_cards_are_released_with_the_nodes_cleaned(client):
    make_fleet(h100=2)
    iid = _running(client)
    # A worker crashed after failing the instance and before releasing it, long ago.
    Instance.objects.filter(pk=iid).update(state="failed")
    InstanceEvent.objects.filter(instance_id=iid).update(created_at=db_now() - timedelta(hours=1))
    assert reconcile()["cards_released"] == 1
    _assert_cleaning(iid)


def test_forced_terminate_of_a_container_leaves_the_node_in_the_pool(client):
    make_fleet(h100=1)
    iid = _running(client, kind="container", count=4)
    client.delete(f"{URL}{iid}/")
    _stuck(iid)
    assert reconcile()["forced"] == 1
    assert list(Node.objects.values_list("state", flat=True)) == ["available"]
    assert not OutboxMessage.objects.filter(task="provisioning.node_clean").exists()
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()


def test_a_bare_metal_stop_says_its_nodes_are_wiped(client):
    """The API's state reason of a finished stop says what it kept (before: "stopped", read as a kept disk)."""
    make_fleet(h100=2)
    iid = _running(client)
    assert client.post(f"{URL}{iid}/stop/").status_code == 202
    assert instance_advance(iid) == "stopped"
    assert client.get(f"{URL}{iid}/").json()["state_reason"] == "stopped: nothing kept, its nodes are wiped when released"
    _assert_cleaning(iid)
