"""The tick locks accounts in chunks (pk order): with several chunks, and an account that a concurrent
posting empties while the tick waits for its lock, every organization still spends trial before cash.

PostgreSQL rechecks a row it waited for against the query's filter (`kind = 'cash' OR balance > 0`) and, when
the row no longer matches, leaves it out and takes the next one before LIMIT counts: the chunk still comes back
full, so only the last chunk is short and the loop never ends early."""
import threading
import uuid
from datetime import timedelta

import pytest
from django.db import transaction

from billing import tick
from billing.ledger import accounts_lock_all, org_account_ids
from billing.models import Account, MeterCharge, Transfer
from billing.services import meter_open, meters_close, trial_expire, trial_grant
from billing.verify import ledger_verify
from core.dbclock import db_now
from tests.factories.billing import fund
from tests.factories.tenancy import OrganizationFactory
from tests.races import Aside

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_a_credit_emptied_meanwhile_leaves_no_chunk_short_and_every_org_spends_in_order(settings, monkeypatch):
    monkeypatch.setattr(tick, "CHUNK", 2)  # 3 organizations, one meter each: two chunk transactions
    settings.TRIAL_CREDIT_UCNY = 1_000
    orgs = [OrganizationFactory() for _ in range(3)]
    t0 = db_now() - timedelta(days=1)
    for org in orgs:
        trial_grant(org=org, user=None)
        fund(org, 10_000)
        meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1,
                   rate=3_600_000, opened_at=t0)  # 1,000 µCNY per second
    locked, release = threading.Event(), threading.Event()

    def expire_first_trial():  # holds the first organization's trial row, then moves its remainder out
        with transaction.atomic():
            accounts_lock_all([org_account_ids([orgs[0].pk])[orgs[0].pk]["trial"]])
            locked.set()
            release.wait(10)
            trial_expire(org=orgs[0])

    expiry = Aside(expire_first_trial)
    assert locked.wait(10)
    ticking = Aside(lambda: tick.meter_tick(now=t0 + timedelta(seconds=5), watch=False))
    assert ticking.running(0.5)  # waiting for the trial row
    release.set()
    expiry.result()
    assert ticking.result()["charged"] == 3 * 5_000
    balances = [dict(Account.objects.filter(organization=o).values_list("kind", "balance")) for o in orgs]
    assert balances == [{"trial": 0, "compensation": 0, "grant": 0, "cash": 5_000}] + 2 * [
        {"trial": 0, "compensation": 0, "grant": 0, "cash": 6_000}]
    assert Transfer.objects.filter(key__startswith="tick:", key__endswith=":trial").count() == 2
    assert ledger_verify() == []


def test_a_close_during_a_tick_waits_only_for_its_own_rows(monkeypatch):
    """The tick waits (inside its first chunk) for organization A's cash row; meanwhile B's close posts its final
    delta at once: the tick holds no revenue row and no row of B. (The former tick locked compute_revenue first,
    so B's close waited for the whole tick.)"""
    monkeypatch.setattr(tick, "CHUNK", 1)
    a, b = sorted([OrganizationFactory(), OrganizationFactory()], key=lambda o: str(o.pk))  # A's chunk comes first
    t0 = db_now() - timedelta(days=1)
    meters = {}
    for org in (a, b):
        fund(org, 1_000_000)
        meters[org.pk] = meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1,
                                    rate=3_600_000, opened_at=t0)  # 1,000 µCNY per second
    locked, release = threading.Event(), threading.Event()

    def hold_a_cash():
        with transaction.atomic():
            accounts_lock_all([org_account_ids([a.pk])[a.pk]["cash"]])
            locked.set()
            release.wait(20)

    holder = Aside(hold_a_cash)
    assert locked.wait(10)
    ticking = Aside(lambda: tick.meter_tick(now=t0 + timedelta(seconds=10), watch=False))
    assert ticking.running(0.5)  # waiting for A's cash, inside its first chunk
    closing = Aside(lambda: meters_close(instance_id=meters[b.pk].instance_id, at=t0 + timedelta(seconds=20)))
    assert not closing.running(5), "B's close waited for the tick"
    closing.result()
    assert ticking.running()
    release.set()
    holder.result()
    stats = ticking.result()
    assert stats["meters"] == 1 and stats["charged"] == 10_000  # A only: B's meter was closed meanwhile
    cash = dict(Account.objects.filter(kind="cash", organization__in=[a, b]).values_list("organization_id", "balance"))
    assert cash == {a.pk: 1_000_000 - 10_000, b.pk: 1_000_000 - 20_000}
    assert Transfer.objects.filter(meter_id=meters[b.pk].pk).values_list("credit_account_id", flat=True).get() == -2
    a_cash = org_account_ids([a.pk])[a.pk]["cash"]
    assert Transfer.objects.filter(code="meter", debit_account_id=a_cash).values_list(
        "credit_account_id", flat=True).get() == -6
    assert MeterCharge.objects.filter(meter_id=meters[a.pk].pk).values_list("amount", flat=True).get() == 10_000
    assert ledger_verify() == []
