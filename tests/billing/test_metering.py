"""Meters on PostgreSQL: cumulative floor deltas through ticks, closes, crashes inside the posting
transaction and replays; a meter's total is always floor(rate × cards × seconds / 3600)."""
import random
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from billing.metering import meter_post_now
from billing.models import Account, Meter, MeterCharge, Transfer, WriteOff
from billing.rating import cumulative_charge
from billing.services import meter_open, meters_close
from billing.tick import meter_tick
from billing.verify import ledger_verify
from core.dbclock import db_now
from core.failpoints import FailpointCrash, armed
from tests.factories.billing import fund
from tests.factories.tenancy import OrganizationFactory

pytestmark = pytest.mark.django_db

H100 = 1_900_000
FAILPOINTS = [None, "billing.tick:after_post", "billing.tick:before_commit",
              "billing.meter_post:after_spend", "billing.meter_post:before_commit",
              "billing.meters_close:before_close"]


def open_meter(org, *, cards=1, rate=H100, item_index=0, instance_id=None):
    # Opened 40 days ago: the tests' simulated seconds (up to 30 days) have all run by the database clock,
    # which meters_close never bills past.
    return meter_open(org=org, instance_id=instance_id or uuid.uuid4(), item_index=item_index, accelerator="h100",
                      cards=cards, rate=rate, opened_at=db_now() - timedelta(days=40))


def assert_meter_exact(meter):
    meter.refresh_from_db()
    expected = cumulative_charge(meter.rate, meter.cards, meter.posted_through_seconds)
    assert meter.posted_amount + meter.written_off_amount == expected
    assert meter.posted_amount == sum(MeterCharge.objects.filter(meter_id=meter.pk).values_list("amount", flat=True))
    assert meter.written_off_amount == sum(WriteOff.objects.filter(meter_id=meter.pk).values_list("amount",
                                                                                                flat=True))


def test_open_is_idempotent_per_item_and_close_posts_final_delta():
    org = OrganizationFactory()
    fund(org, 100_000_000)
    iid = uuid.uuid4()
    a = open_meter(org, instance_id=iid, cards=2)
    assert open_meter(org, instance_id=iid, cards=2).pk == a.pk
    b = open_meter(org, instance_id=iid, item_index=1, cards=1, rate=3_000_000)
    assert Meter.objects.filter(instance_id=iid, closed_at=None).count() == 2
    t0 = a.opened_at
    meters_close(instance_id=iid, at=t0 + timedelta(seconds=3600, microseconds=999_999))
    a.refresh_from_db()
    b.refresh_from_db()
    assert a.closed_at and b.closed_at
    assert a.posted_amount == 2 * H100 and a.posted_through_seconds == 3600
    assert Transfer.objects.filter(key=f"meter:{a.pk}:3600:cash", amount=2 * H100).exists()
    meters_close(instance_id=iid)  # closing again changes nothing
    assert Transfer.objects.filter(meter_id=a.pk).count() == 1
    # a new run opens a new meter
    assert open_meter(org, instance_id=iid, cards=2).pk != a.pk


@hyp_settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(["tick", "post", "replay"]), st.integers(-20, 400),
                                st.integers(0, 999_999), st.sampled_from(FAILPOINTS)), min_size=1, max_size=25),
       cards=st.integers(1, 8), funds=st.integers(0, 3_000_000), close_crash=st.sampled_from(FAILPOINTS))
# a stale tick after a later one: the close at s + 7 would fall before the second already posted
@example(steps=[("tick", 8, 0, None), ("tick", -8, 0, None)], cards=1, funds=0, close_crash=None)
def test_random_ticks_with_crashes_and_replays_stay_exact(steps, cards, funds, close_crash):
    org = OrganizationFactory()
    if funds:
        fund(org, funds)
    other = OrganizationFactory()
    fund(other, 50_000_000)
    meter = open_meter(org, cards=cards)
    bystander = open_meter(other, cards=1, rate=3_100_000)
    t0 = meter.opened_at
    Meter.objects.filter(pk=bystander.pk).update(opened_at=t0)
    # reached: the latest second a committed posting carried the meter to. A negative gap is a stale
    # tick (posts nothing, never un-posts), so `s` may fall below it.
    s, last_now, reached = 0, t0, 0
    for kind, gap, micros, crash in steps:
        s = max(s + gap, 0)
        now = t0 + timedelta(seconds=s, microseconds=micros)
        if kind == "replay":
            now = last_now  # the same tick again: nothing new
        before = dict(Account.objects.values_list("pk", "balance"))
        try:
            with armed({crash} if crash else set()):
                if kind == "post":
                    meter_post_now(meter_id=meter.pk, now=now)
                else:
                    meter_tick(now=now, watch=False)
            reached = max(reached, (now - t0) // timedelta(seconds=1))
        except FailpointCrash:
            # the whole posting rolled back: balances are as before
            assert dict(Account.objects.values_list("pk", "balance")) == before
        last_now = now
        assert_meter_exact(meter)
        assert_meter_exact(bystander)
        assert meter.posted_through_seconds == reached
    closing = max(s, reached) + 7  # after every posting, so the close always posts a final delta
    end = t0 + timedelta(seconds=closing)
    for _ in range(2):  # a crash while closing, then the retry
        try:
            with armed({close_crash} if close_crash else set()):
                meters_close(instance_id=meter.instance_id, at=end)
                meters_close(instance_id=bystander.instance_id, at=end)
            break
        except FailpointCrash:
            close_crash = None
    meter.refresh_from_db()
    assert meter.closed_at is not None
    assert meter.posted_through_seconds == closing
    assert meter.posted_amount + meter.written_off_amount == H100 * cards * closing // 3600
    assert_meter_exact(meter)
    assert_meter_exact(bystander)
    cash = Account.objects.get(organization=org, kind="cash").balance
    assert cash == funds - meter.posted_amount and cash >= 0
    assert ledger_verify() == []


@pytest.mark.django_db(transaction=True)  # real commits: thousands of savepoints in one test transaction crawl
def test_thirty_days_of_one_h100_on_postgres_is_exactly_1368_cny():
    rng = random.Random(1368)
    org = OrganizationFactory()
    fund(org, 2_000_000_000)
    meter = open_meter(org)
    t0, end = meter.opened_at, 30 * 86400
    jump_at = rng.randint(200, 1800)
    s, ticks = 0, 0
    while s < end:
        s = min(s + (29 * 86400 if ticks == jump_at else rng.randint(1, 90)), end)
        meter_tick(now=t0 + timedelta(seconds=s, microseconds=rng.randint(0, 999_999)), watch=False)
        ticks += 1
    meters_close(instance_id=meter.instance_id, at=t0 + timedelta(days=30))
    meter.refresh_from_db()
    assert ticks > 1500
    assert meter.posted_through_seconds == end
    assert meter.posted_amount == 1_368_000_000 and meter.written_off_amount == 0
    assert Account.objects.get(organization=org, kind="cash").balance == 2_000_000_000 - 1_368_000_000
    assert ledger_verify() == []


def test_tick_uses_a_constant_number_of_queries():
    def tick_queries(n):
        orgs = [OrganizationFactory() for _ in range(n)]
        for o in orgs:
            fund(o, 10_000_000)
        meters = [open_meter(o) for o in orgs]
        Meter.objects.filter(pk__in=[m.pk for m in meters]).update(opened_at=db_now() - timedelta(seconds=120))
        with CaptureQueriesContext(connection) as ctx:
            stats = meter_tick(watch=False)
        assert stats["meters"] >= n and stats["transfers"] >= n
        for m in meters:
            meters_close(instance_id=m.instance_id)
        return len(ctx.captured_queries)

    assert tick_queries(3) == tick_queries(40)


def test_write_off_when_funds_run_out_and_tick_skips_nothing():
    org = OrganizationFactory()
    fund(org, 1_000)
    meter = open_meter(org, cards=1, rate=3_600_000)  # 1000 µCNY per second
    meter_tick(now=meter.opened_at + timedelta(seconds=5), watch=False)
    meter.refresh_from_db()
    assert meter.posted_amount == 1_000 and meter.written_off_amount == 4_000
    wo = WriteOff.objects.get(meter=meter)
    assert (wo.amount, wo.seconds, wo.key) == (4_000, 4, f"meter:{meter.pk}:5")
    assert Account.objects.get(organization=org, kind="cash").balance == 0
    assert ledger_verify() == []


def test_tick_spends_trial_then_compensation_then_cash(settings):
    from billing.services import compensation_grant, trial_grant

    settings.TRIAL_CREDIT_UCNY = 1_000
    org = OrganizationFactory()
    trial_grant(org=org, user=None)
    compensation_grant(org=org, breach_id="tick-order", amount=2_000)
    fund(org, 10_000)
    meter = open_meter(org, rate=3_600_000)  # 1,000 µCNY per second
    meter_tick(now=meter.opened_at + timedelta(seconds=5), watch=False)
    balances = dict(Account.objects.filter(organization=org).values_list("kind", "balance"))
    assert balances == {"trial": 0, "compensation": 0, "grant": 0, "cash": 8_000}
    assert sorted(Transfer.objects.filter(code="meter").values_list("key", "amount")) == [
        (f"tick:{meter.pk}:5:cash", 2_000), (f"tick:{meter.pk}:5:compensation", 2_000),
        (f"tick:{meter.pk}:5:trial", 1_000)]
    assert list(MeterCharge.objects.filter(meter_id=meter.pk).values_list("through_seconds", "amount")) == [
        (5, 5_000)]
    assert ledger_verify() == []
