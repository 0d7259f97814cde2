"""A stop task that outlives the stop: the reconciler re-dispatches a stop stuck on a slow release (a dead
agent), so two stop tasks run at once; the first one ends the stop and the customer starts the instance again
while the second still walks the groups it read at its start. That one must leave the new placement alone:
before, it released the old (already released) groups through the driver again (an agent release by the
reused container name kills the new container) and then freed every card the instance held — the new ones."""
from unittest import mock

import pytest

from inventory.models import CardAllocation
from provisioning.drivers.simulated import SimulatedDriver
from provisioning.models import Instance, NodeGroup
from provisioning.services import steps
from provisioning.services.instances import instance_start, instance_stop
from provisioning.tasks import instance_advance
from tests.factories.provisioning import make_fleet

pytestmark = pytest.mark.django_db
TWO_ITEMS = {"name": "two", "kind": "container", "image": "pytorch-2.3-cuda12.3",
             "items": [{"accelerator": "h100-sxm-80g", "count": 2}, {"accelerator": "a800-sxm-80g", "count": 2}]}


def _stopping(client, owner) -> str:
    """A running two-item instance whose stop was just requested; returns its id."""
    make_fleet(h100=1, a800=1)
    r = client.post("/api/v1/instances/", TWO_ITEMS, format="json")
    assert r.status_code == 201, r.json()
    iid = r.json()["id"]
    assert instance_advance(iid) == "running"
    instance_stop(org=owner.organization, instance_id=iid, actor=owner.user)
    return iid


def test_a_stop_task_that_outlived_the_stop_leaves_the_restarted_instance_alone(client, owner):
    iid = _stopping(client, owner)
    original = SimulatedDriver.release
    calls, other = [], {"done": False}

    def release(self, node, cards, *, instance_id):
        calls.append((node.hostname, list(cards)))
        if not other["done"]:  # meanwhile the other stop task ends the stop; the customer starts again
            other["done"] = True
            steps.instance_stop_finish(iid)
            assert Instance.objects.get(pk=iid).state == "stopped"
            instance_start(org=owner.organization, instance_id=iid, actor=owner.user)
            assert instance_advance(iid) == "running"
            calls.append(("restarted", None))
        return original(self, node, cards, instance_id=instance_id)

    with mock.patch.object(SimulatedDriver, "release", release):
        steps.instance_stop_finish(iid)  # the first stop task, back from its slow first release
    assert Instance.objects.get(pk=iid).state == "running"
    live = NodeGroup.objects.filter(instance_id=iid, released_at__isnull=True)
    assert live.count() == 2  # before: 0, and its 4 cards free for the next tenant
    assert CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).count() == 4
    assert calls[-1] == ("restarted", None)  # its other old group was released already: no driver call for it


def test_a_stale_stop_task_leaves_a_later_stop_of_the_restarted_instance_to_its_own_task(client, owner):
    """Started and stopped again while the stale task was in its driver call: the instance is `stopping` once
    more, but its groups are the new placement's, whose containers the new stop task has not released yet.
    Freeing their cards on a state check alone (the ABA) gave them to the next tenant with containers on them."""
    iid = _stopping(client, owner)
    original, other = SimulatedDriver.release, {"done": False}

    def release(self, node, cards, *, instance_id):
        if not other["done"]:
            other["done"] = True
            steps.instance_stop_finish(iid)
            instance_start(org=owner.organization, instance_id=iid, actor=owner.user)
            assert instance_advance(iid) == "running"
            instance_stop(org=owner.organization, instance_id=iid, actor=owner.user)  # its own task comes later
        return original(self, node, cards, instance_id=instance_id)

    with mock.patch.object(SimulatedDriver, "release", release):
        steps.instance_stop_finish(iid)  # the stale task
    assert Instance.objects.get(pk=iid).state == "stopping"
    assert NodeGroup.objects.filter(instance_id=iid, released_at__isnull=True).count() == 2
    assert CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).count() == 4
    steps.instance_stop_finish(iid)  # the new stop's own task releases them
    assert Instance.objects.get(pk=iid).state == "stopped"
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()
