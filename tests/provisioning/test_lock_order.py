"""Organization and instance locks between real PostgreSQL connections.

A start locks the organization, then the instance. A stop or terminate locks only the instance, then writes an
audit event, whose foreign key takes KEY SHARE on the organization. Under FOR UPDATE that insert waited for the
start, which waited for the stop: PostgreSQL aborted one of them with a deadlock (a 500 to the customer). The
organization lock is FOR NO KEY UPDATE now, and every path takes the organization before the instance."""
import threading

import pytest
from django.db import connection, transaction

from provisioning.lock_objects import instance_lock
from provisioning.services import waitlist
from tenancy.audit import audit_record
from tenancy.lock_objects import organization_lock
from tests.factories.provisioning import InstanceFactory
from tests.races import Aside

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


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
