"""The reconciler forces a stop stuck past its deadlines to `stopped` and frees its cards. Both happen under the
instance's lock in one transaction: before, the cards were freed after the `stopped` commit, so a start landing
in between got a new placement that the reconciler then freed too (cards double-booked, containers orphaned).
When the pass ran in one transaction this held; the session-lock pass lost it."""
from datetime import timedelta
from unittest import mock

import pytest

from core.dbclock import db_now
from inventory.models import CardAllocation
from provisioning.models import Instance, NodeGroup
from provisioning.services import reconciler
from provisioning.services.instances import instance_start, instance_stop
from provisioning.tasks import instance_advance
from tests.factories.provisioning import container_body, make_fleet
from tests.races import Aside

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_a_start_right_after_a_forced_stop_keeps_its_new_placement(client, owner):
    make_fleet(h100=1)
    r = client.post("/api/v1/instances/", container_body("h100-sxm-80g", 2), format="json")
    assert r.status_code == 201, r.json()
    iid = r.json()["id"]
    assert instance_advance(iid) == "running"
    instance_stop(org=owner.organization, instance_id=iid, actor=owner.user)  # no worker: the stop is stuck
    Instance.objects.filter(pk=iid).update(step_retries=2, step_deadline=db_now() - timedelta(hours=1))
    real = reconciler.placement_release_clean
    start = {}

    def release_after_a_start(**kwargs):
        # The customer presses start as the reconciler frees the cards.
        start["aside"] = Aside(lambda: instance_start(org=owner.organization, instance_id=iid, actor=owner.user))
        start["aside"].running(1.0)  # with the fix it waits for the instance's lock
        return real(**kwargs)

    with mock.patch.object(reconciler, "placement_release_clean", release_after_a_start):
        assert reconciler.reconcile()["forced"] == 1
    assert start["aside"].result(10).state == "provisioning"
    assert instance_advance(iid) == "running"
    assert NodeGroup.objects.filter(instance_id=iid, released_at__isnull=True).count() == 1
    assert CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).count() == 2  # before: 0
