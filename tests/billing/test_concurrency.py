"""50 barrier-synchronised threads charging one organization that can pay for 10: funds never go
below zero, the rest is written off, no deadlock, and the ledger still balances."""
import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connection

from billing.funds import available_funds
from billing.models import Account, Meter, WriteOff
from billing.services import meter_open, meters_close, trial_grant
from billing.tick import meter_tick
from billing.verify import ledger_verify
from core.dbclock import db_now
from tests.factories.billing import fund
from tests.factories.tenancy import OrganizationFactory

pytestmark = [pytest.mark.django_db(transaction=True)]

THREADS = 50
PER_METER = 60_000  # 60 s at 3.6 CNY/card-hour = 1,000 µCNY per second


def test_fifty_threads_spend_against_funds_for_ten(settings):
    settings.TRIAL_CREDIT_UCNY = 3 * PER_METER
    org = OrganizationFactory()
    trial_grant(org=org, user=None)
    fund(org, 7 * PER_METER)
    assert available_funds(org) == 10 * PER_METER
    meters = [meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1,
                         rate=3_600_000) for _ in range(THREADS)]
    t0 = db_now() - timedelta(hours=1)  # the closes at t0 + 60 s lie in the past (never billed ahead)
    Meter.objects.filter(pk__in=[m.pk for m in meters]).update(opened_at=t0)
    barrier = threading.Barrier(THREADS + 2)
    errors, lows = [], []
    done = threading.Event()

    def close(meter):
        try:
            barrier.wait()
            meters_close(instance_id=meter.instance_id, at=t0 + timedelta(seconds=60))
        except Exception as exc:  # collected: a deadlock would surface here
            errors.append(exc)
        finally:
            connection.close()

    def tick():
        try:
            barrier.wait()
            meter_tick(now=t0 + timedelta(seconds=30), watch=False)
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    def watch():
        try:
            while not done.is_set():
                if available_funds(org) < 0:
                    lows.append(available_funds(org))
        finally:
            connection.close()

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=close, args=(m,)) for m in meters] + [threading.Thread(target=tick)]
    for t in threads:
        t.start()
    barrier.wait()
    for t in threads:
        t.join(timeout=120)
    done.set()
    watcher.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "threads hung (deadlock?)"
    assert errors == []
    assert lows == []
    balances = dict(Account.objects.filter(organization=org).values_list("kind", "balance"))
    assert balances["trial"] == 0 and balances["cash"] == 0 and available_funds(org) == 0
    posted = sum(Meter.objects.filter(organization=org).values_list("posted_amount", flat=True))
    written = sum(WriteOff.objects.filter(organization=org).values_list("amount", flat=True))
    assert posted == 10 * PER_METER
    assert posted + written == THREADS * PER_METER
    assert WriteOff.objects.filter(organization=org).count() >= THREADS - 10
    assert Meter.objects.filter(organization=org, closed_at=None).count() == 0
    assert ledger_verify() == []
