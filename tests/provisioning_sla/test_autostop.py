"""The ledger's auto-stop hook as provisioning registers it: stop now when due, never close a meter ahead."""
from datetime import timedelta

import pytest

from billing.hooks import autostop_hook
from billing.models import Meter
from core.dbclock import db_now
from provisioning.models import Instance
from provisioning.services.autostop import autostop_schedule
from provisioning.tasks import instance_advance
from tests.factories.provisioning import container_body, make_fleet

from .helpers import URL

pytestmark = [pytest.mark.pg, pytest.mark.django_db]


def _running(client) -> str:
    make_fleet(h100=1)
    iid = client.post(URL, container_body("h100-sxm-80g", 1), format="json").json()["id"]
    assert instance_advance(iid) == "running"
    return iid


def test_the_registered_hook_is_provisionings_scheduler():
    assert autostop_hook().__module__ == "provisioning.apps"


def test_exhaustion_in_the_future_keeps_the_instance_running_until_then(client, owner):
    iid = _running(client)
    assert autostop_schedule(org_id=owner.organization_id, at=db_now() + timedelta(seconds=40)) == []
    assert Instance.objects.get(pk=iid).state == "running"  # the stop is queued for the exhaustion second
    assert Meter.objects.get(instance_id=iid).closed_at is None  # nothing charged ahead of time


def test_exhaustion_already_passed_stops_now_and_closes_at_that_second(client, owner):
    iid = _running(client)
    at = db_now()
    assert autostop_schedule(org_id=owner.organization_id, at=at) == [Instance.objects.get(pk=iid).pk]
    inst = Instance.objects.get(pk=iid)
    assert inst.state == "stopping" and inst.state_reason == "auto-stop: funds_exhausted"
    assert Meter.objects.get(instance_id=iid).closed_at == at
    assert instance_advance(iid) == "stopped"
