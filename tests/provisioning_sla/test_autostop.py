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

pytestmark = pytest.mark.django_db


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


def _capped(iid) -> None:
    """As billing's funds watch does before it asks for the stop: the open meter billed up to the exhaustion."""
    Meter.objects.filter(instance_id=iid, closed_at__isnull=True).update(billable_until_seconds=0)


def test_exhaustion_already_passed_stops_now_and_closes_at_that_second(client, owner):
    iid = _running(client)
    _capped(iid)
    at = db_now()
    assert autostop_schedule(org_id=owner.organization_id, at=at) == [Instance.objects.get(pk=iid).pk]
    inst = Instance.objects.get(pk=iid)
    assert inst.state == "stopping" and inst.state_reason == "auto-stop: funds_exhausted"
    assert Meter.objects.get(instance_id=iid).closed_at == at
    assert instance_advance(iid) == "stopped"


def test_an_instance_started_after_the_exhaustion_is_left_running(client, owner):
    """The request is for the instances whose meters billing capped; one started since (after a top-up) has an
    uncapped meter. Before, a late or repeated request stopped it too and closed its meter before it opened."""
    old = _running(client)
    _capped(old)
    at = db_now()
    new = client.post(URL, container_body("h100-sxm-80g", 1), format="json").json()["id"]
    assert instance_advance(new) == "running"
    assert autostop_schedule(org_id=owner.organization_id, at=at) == [Instance.objects.get(pk=old).pk]
    assert Instance.objects.get(pk=new).state == "running"
    assert Meter.objects.get(instance_id=new).closed_at is None
