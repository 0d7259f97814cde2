"""Beat tasks: the tick runs once under its advisory lock, and in a real worker process."""
import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction

from billing.models import Meter, MeterCharge
from billing.services import meter_open
from billing.tasks import meter_tick_task, trial_expiry_task, verify_ledger_task
from billing.tick import meter_tick
from core.dbclock import db_now
from core.locks import try_advisory_xact_lock
from tests.factories.billing import fund
from tests.factories.tenancy import OrganizationFactory


def _open_backdated(org, seconds):
    m = meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1, rate=1_900_000,
                   opened_at=db_now() - timedelta(seconds=seconds))
    return m


@pytest.mark.django_db(transaction=True)
def test_a_second_tick_does_nothing_while_one_holds_the_lock():
    org = OrganizationFactory()
    fund(org, 10_000_000)
    meter = _open_backdated(org, 120)
    held, release = threading.Event(), threading.Event()

    def holder():
        try:
            with transaction.atomic():
                assert try_advisory_xact_lock("billing.meter_tick")
                held.set()
                release.wait(30)
        finally:
            connection.close()

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(30)
    try:
        assert meter_tick() == {"skipped": True}
        assert Meter.objects.get(pk=meter.pk).posted_through_seconds == 0
    finally:
        release.set()
        t.join(30)
    assert meter_tick()["meters"] == 1
    assert Meter.objects.get(pk=meter.pk).posted_through_seconds >= 120


@pytest.mark.worker
def test_beat_tasks_run_in_a_real_worker(celery_worker_process):
    org = OrganizationFactory()
    fund(org, 10_000_000)
    meter = _open_backdated(org, 3600)
    meter_tick_task.delay()
    trial_expiry_task.delay()
    verify_ledger_task.delay()
    deadline = time.time() + 60
    while time.time() < deadline and not MeterCharge.objects.filter(meter_id=meter.pk).exists():
        time.sleep(0.2)
    meter.refresh_from_db()
    assert meter.posted_through_seconds >= 3600 and meter.posted_amount >= 1_900_000
    assert MeterCharge.objects.filter(meter_id=meter.pk).count() == 1
