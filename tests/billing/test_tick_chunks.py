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
from billing.models import Account, Transfer
from billing.services import meter_open, trial_expire, trial_grant
from billing.verify import ledger_verify
from core.dbclock import db_now
from tests.factories.billing import fund
from tests.factories.tenancy import OrganizationFactory
from tests.races import Aside

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


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
    assert Transfer.objects.filter(key__startswith="meter:", key__endswith=":trial").count() == 2
    assert ledger_verify() == []
