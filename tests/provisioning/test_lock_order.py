"""Organization and instance locks between real PostgreSQL connections.

A start locks the organization, then the instance. A stop or terminate locks only the instance, then writes an
audit event, whose foreign key takes KEY SHARE on the organization. Under FOR UPDATE that insert waited for the
start, which waited for the stop: PostgreSQL aborted one of them with a deadlock (a 500 to the customer). The
organization lock is FOR NO KEY UPDATE now, and every path takes the organization before the instance."""
import threading
from unittest import mock

import pytest
from django.db import connection, transaction

from provisioning.lock_objects import instance_lock
from provisioning.services import waitlist
from provisioning.tasks import instance_advance
from tenancy.audit import audit_record
from tenancy.lock_objects import organization_lock
from tests.factories.provisioning import InstanceFactory, container_body, make_fleet
from tests.races import Aside

pytestmark = [pytest.mark.django_db(transaction=True)]


def _lock_timeout(ms: int) -> None:
    with connection.cursor() as cur:
        cur.execute(f"SET LOCAL lock_timeout = '{ms}ms'")


def _hold_org(org_id, held: threading.Event, release: threading.Event):
    with transaction.atomic():
        organization_lock(org_id)
        held.set()
        release.wait(10)


def test_rows_that_reference_a_locked_organization_can_still_be_written(owner):
    org = owner.organization
    held, release = threading.Event(), threading.Event()
    holder = Aside(lambda: _hold_org(org.pk, held, release))
    try:
        assert held.wait(10)
        with transaction.atomic():
            _lock_timeout(2000)  # with FOR UPDATE: LockNotAvailable after 2 s
            audit_record(action="instance.stop", org=org, actor=owner.user, details={})
            InstanceFactory(organization=org, state="running")
    finally:
        release.set()
        holder.result()


def test_a_stop_and_a_start_of_one_instance_do_not_deadlock(owner):
    org = owner.organization
    inst = InstanceFactory(organization=org, state="running")
    stop_holds, start_waits = threading.Event(), threading.Event()

    def stop():  # as instance_stop: the instance, then an audit event
        with transaction.atomic():
            instance_lock(instance_id=inst.pk)
            stop_holds.set()
            assert start_waits.wait(10)
            audit_record(action="instance.stop", org=org, actor=owner.user, target=inst, details={})
        return "stopped"

    def start():  # as instance_start: the organization, then the instance
        assert stop_holds.wait(10)
        with transaction.atomic():
            organization_lock(org.pk)
            start_waits.set()
            instance_lock(instance_id=inst.pk)
        return "started"

    a, b = Aside(stop), Aside(start)
    assert (a.result(), b.result()) == ("stopped", "started")


def test_a_waitlist_wake_takes_the_organization_before_the_instance(owner):
    """Else a wake holding the instance and waiting for the organization deadlocks with a start or create
    holding the organization: while the organization is held, the wake must not be holding the instance."""
    org = owner.organization
    inst = InstanceFactory(organization=org, state="waitlisted")
    held, release = threading.Event(), threading.Event()
    holder = Aside(lambda: _hold_org(org.pk, held, release))
    try:
        assert held.wait(10)
        wake = Aside(lambda: waitlist._wake_one(inst.pk))
        assert wake.running(0.5)  # waiting for the organization
        with transaction.atomic():
            _lock_timeout(2000)
            instance_lock(instance_id=inst.pk)  # free: the wake does not hold it yet
    finally:
        release.set()
        holder.result()
    assert wake.result() in (waitlist.WOKEN, waitlist.NO_CAPACITY, waitlist.SKIPPED)


def test_each_waitlist_wake_commits_and_lets_go_of_its_locks(client, owner):
    """The pass held every wake's organization, instance and card locks to its end (one transaction): a later
    row's organization lock then deadlocked with a start waiting for a card an earlier wake had claimed."""
    make_fleet(h100=1)
    holder = client.post("/api/v1/instances/", container_body("h100-sxm-80g", 8), format="json").json()["id"]
    waiting = client.post("/api/v1/instances/", container_body("h100-sxm-80g", 8, waitlist=True),
                          format="json").json()
    assert waiting["state"] == "waitlisted"
    assert client.delete(f"/api/v1/instances/{holder}/").status_code == 202
    assert instance_advance(holder) == "terminated"
    real, seen = waitlist._wake_one, []

    def wake_then_look(instance_id):
        outcome = real(instance_id)

        def lock_both():  # as a start of that organization would, right after this wake
            with transaction.atomic():
                _lock_timeout(1000)
                organization_lock(owner.organization_id)
                instance_lock(instance_id=instance_id)

        Aside(lock_both).result()
        seen.append(outcome)
        return outcome

    with mock.patch.object(waitlist, "_wake_one", wake_then_look):
        assert waitlist.waitlist_wake() == 1
    assert seen == [waitlist.WOKEN]
