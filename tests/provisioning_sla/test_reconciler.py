"""The reconciler in this process: stuck instances resumed then failed, leaked cards and meters, the lock."""
from datetime import timedelta

import pytest
from django.db import connections

from billing.models import Meter
from inventory.models import CardAllocation
from provisioning.models import Instance, InstanceEvent
from provisioning.services.reconciler import reconcile
from provisioning.services.sla import sla_settle
from provisioning.tasks import instance_advance
from tests.factories.provisioning import container_body, make_fleet

from .helpers import URL, hours, leaks, move

pytestmark = pytest.mark.django_db


def _create(client, count=2) -> str:
    r = client.post(URL, container_body("h100-sxm-80g", count), format="json")
    assert r.status_code == 201, r.json()
    return r.json()["id"]


def test_stuck_provisioning_is_resumed_once_then_failed_with_cards_released(client, django_capture_on_commit_callbacks):
    make_fleet(h100=1)
    iid = _create(client)  # no worker: it stays in provisioning, as after a crash
    assert reconcile()["resumed"] == 0  # not past its step deadline yet
    move(iid, step_deadline=-timedelta(hours=1))
    with django_capture_on_commit_callbacks() as dispatched:
        assert reconcile()["resumed"] == 1
    assert len(dispatched) == 1  # instance_advance re-dispatched
    inst = Instance.objects.get(pk=iid)
    assert inst.step_retries == 1 and inst.state == "provisioning"
    assert reconcile()["resumed"] == 0  # the renewed step deadline is in the future
    move(iid, step_deadline=-timedelta(hours=1))  # the re-dispatched task did not finish either
    assert reconcile()["failed"] == 1
    inst.refresh_from_db()
    assert inst.state == "failed" and "stuck in provisioning" in inst.state_reason
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()
    assert sla_settle(instance_id=iid) == hours(1, 2)  # a failure is compensated
    assert leaks() == {"cards": [], "meters": []}


def test_stuck_terminating_is_forced_to_terminated_after_retries(client):
    make_fleet(h100=1)
    iid = _create(client)
    instance_advance(iid)
    client.delete(f"{URL}{iid}/")
    for _ in range(2):
        move(iid, step_deadline=-timedelta(hours=1))
        assert reconcile()["resumed"] == 1
    move(iid, step_deadline=-timedelta(hours=1))
    assert reconcile()["forced"] == 1
    inst = Instance.objects.get(pk=iid)
    assert inst.state == "terminated" and inst.terminated_at is not None
    assert leaks() == {"cards": [], "meters": []}


def test_leaked_cards_and_meters_are_released_and_closed_at_the_stop(client):
    from core.dbclock import db_now

    make_fleet(h100=1)
    iid = _create(client)
    instance_advance(iid)
    meter = Meter.objects.get(instance_id=iid, closed_at__isnull=True)
    # Simulate a bug an hour ago: the instance left running but kept its cards and its meter.
    opened = db_now() - timedelta(hours=1)
    left_at = opened + timedelta(seconds=30)
    InstanceEvent.objects.filter(instance_id=iid).update(created_at=opened - timedelta(minutes=1))
    Meter.objects.filter(pk=meter.pk).update(opened_at=opened)
    Instance.objects.filter(pk=iid).update(state="stopped")
    InstanceEvent.objects.create(instance_id=iid, from_state="running", to_state="stopping", created_at=left_at)
    assert leaks()["cards"] and leaks()["meters"]
    stats = reconcile()
    assert stats["cards_released"] == 1 and stats["meters_closed"] == 1
    assert leaks() == {"cards": [], "meters": []}
    meter.refresh_from_db()
    assert meter.closed_at == left_at  # charged up to the second it left running, not up to now
    assert meter.posted_amount + meter.written_off_amount == 1_900_000 * 2 * 30 // 3600


def test_a_just_failed_instance_keeps_its_cards_for_the_worker_to_release(client):
    make_fleet(h100=1)
    iid = _create(client)
    Instance.objects.filter(pk=iid).update(state="failed")
    InstanceEvent.objects.create(instance_id=iid, from_state="checking", to_state="failed",
                                 created_at=Instance.objects.get(pk=iid).updated_at)
    assert reconcile()["cards_released"] == 0  # within the grace period: the worker's release is in flight
    InstanceEvent.objects.filter(instance_id=iid).update(created_at=Instance.objects.get(pk=iid).created_at
                                                         - timedelta(minutes=10))
    assert reconcile()["cards_released"] == 1


@pytest.mark.django_db(transaction=True)
def test_a_second_reconciler_does_nothing_while_one_holds_the_lock(client):
    other = connections.create_connection("default")
    try:
        with other.cursor() as cur:
            from core.locks import _lock_id

            cur.execute("SELECT pg_try_advisory_lock(%s)", [_lock_id("reconciler")])
            assert cur.fetchone()[0] is True
            assert reconcile() == {"skipped": True}
            cur.execute("SELECT pg_advisory_unlock(%s)", [_lock_id("reconciler")])
        assert "skipped" not in reconcile()
        assert "skipped" not in reconcile()  # the pass let go of its lock
    finally:
        other.close()


def test_leaked_cards_are_not_freed_once_a_start_took_the_instance_on(client):
    """The reconciler judges 'not live' from a read; a start landing before it frees the cards holds cards the
    instance needs again (here: the same ones), which it must not free."""
    from unittest import mock

    from provisioning.services import reconciler

    make_fleet(h100=1)
    iid = _create(client)
    instance_advance(iid)
    from core.dbclock import db_now

    InstanceEvent.objects.filter(instance_id=iid).update(created_at=db_now() - timedelta(hours=1))
    Instance.objects.filter(pk=iid).update(state="stopped")  # kept its cards: leaked
    real = reconciler.placement_release_clean

    def start_lands_first(**kwargs):
        Instance.objects.filter(pk=iid).update(state="provisioning")  # as a start would, under the lock
        return real(**kwargs)

    with mock.patch.object(reconciler, "placement_release_clean", start_lands_first):
        reconciler.cards_leaked_release()
    assert CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).count() == 2
