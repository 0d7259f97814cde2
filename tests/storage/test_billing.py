"""Volumes are billed per GiB-hour on their size through the ordinary meters: 100 GiB for 30 days is exactly
30 × 24 × 100 × the price, across random tick timing, crashes inside the posting transaction and replays (the
ledger's harness, tests/billing/test_metering.py); funds running out never caps a volume's meter."""
import random
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from billing.metering import meter_post_now
from billing.models import Account, Meter, MeterCharge, WriteOff
from billing.tick import meter_tick
from billing.verify import ledger_verify
from billing.watch import funds_watch
from core.dbclock import db_now
from core.failpoints import FailpointCrash, armed
from storage.services import volume_grow
from tests.factories.billing import fund, set_credit_limit
from tests.factories.inventory import ZoneFactory
from tests.factories.storage import make_volume
from tests.factories.tenancy import OrganizationFactory

pytestmark = pytest.mark.django_db

PRICE = 140  # µCNY per GiB-hour (tests/factories/storage.py DISK_PRICE)
THIRTY_DAYS = 30 * 86400
CRASHES = [None, "billing.tick:after_post", "billing.tick:before_commit", "billing.meter_post:after_spend",
           "billing.meter_post:before_commit"]


def volume_meter_backdated(org, *, size_gib=100, name="ckpt"):
    """A 100 GiB disk made by volume_create, its meter opened 40 days ago (so 30 simulated days have all run by the
    database clock)."""
    volume = make_volume(org, ZoneFactory(), name=name, size_gib=size_gib)
    meter = Meter.objects.get(instance_id=volume.pk, closed_at=None)
    Meter.objects.filter(pk=meter.pk).update(opened_at=db_now() - timedelta(days=40))
    meter.refresh_from_db()
    return volume, meter


def exact(meter) -> int:
    meter.refresh_from_db()
    assert meter.posted_amount == sum(MeterCharge.objects.filter(meter_id=meter.pk).values_list("amount", flat=True))
    assert meter.written_off_amount == sum(WriteOff.objects.filter(meter_id=meter.pk).values_list("amount", flat=True))
    return meter.posted_amount + meter.written_off_amount


def test_a_volume_meter_is_opened_at_create_on_its_size_and_price():
    org = OrganizationFactory()
    fund(org, 10_000_000)
    volume, meter = volume_meter_backdated(org)
    assert (meter.subject, meter.cards, meter.rate, meter.accelerator) == ("volume", 100, PRICE, "volume:disk")
    assert volume.price_per_hour == 100 * PRICE


@hyp_settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(["tick", "post", "replay"]), st.integers(-600, 3 * 86400),
                                st.integers(0, 999_999), st.sampled_from(CRASHES)), min_size=1, max_size=20))
def test_100_gib_for_30_days_is_exact_across_random_ticks_and_crashes(steps):
    org = OrganizationFactory()
    fund(org, 1_000_000_000)
    volume, meter = volume_meter_backdated(org)
    t0, s = meter.opened_at, 0
    for kind, gap, micros, crash in steps:
        s = min(max(s + gap, 0), THIRTY_DAYS - 1)
        now = t0 + timedelta(seconds=s, microseconds=micros)
        before = dict(Account.objects.values_list("pk", "balance"))
        try:
            with armed({crash} if crash else set()):
                if kind == "post":
                    meter_post_now(meter_id=meter.pk, now=now)
                else:
                    meter_tick(now=now, watch=False)
                    if kind == "replay":
                        meter_tick(now=now, watch=False)
        except FailpointCrash:
            assert dict(Account.objects.values_list("pk", "balance")) == before  # rolled back whole
        assert exact(meter) == PRICE * 100 * meter.posted_through_seconds // 3600
    meter_tick(now=t0 + timedelta(seconds=THIRTY_DAYS), watch=False)
    assert exact(meter) == 30 * 24 * 100 * PRICE == 10_080_000
    assert meter.posted_amount == 10_080_000 and meter.written_off_amount == 0
    assert Account.objects.get(organization=org, kind="cash").balance == 1_000_000_000 - 10_080_000
    assert ledger_verify() == []


@pytest.mark.django_db(transaction=True)  # real commits, as the ledger's 30-day H100 test
def test_thirty_days_of_100_gib_ticked_every_minute_or_so_is_exact():
    rng = random.Random(27)
    org = OrganizationFactory()
    fund(org, 50_000_000)
    volume, meter = volume_meter_backdated(org)
    t0, s, ticks = meter.opened_at, 0, 0
    while s < THIRTY_DAYS:
        s = min(s + (25 * 86400 if ticks == 300 else rng.randint(1, 900)), THIRTY_DAYS)
        meter_tick(now=t0 + timedelta(seconds=s, microseconds=rng.randint(0, 999_999)), watch=False)
        ticks += 1
    meter.refresh_from_db()
    assert ticks > 500 and meter.posted_through_seconds == THIRTY_DAYS
    assert meter.posted_amount == 30 * 24 * 100 * PRICE
    assert ledger_verify() == []


def test_out_of_funds_caps_instance_meters_but_never_the_volume_one():
    """Auto-stop caps the instances' meters at the exhaustion second; the volume's keeps accruing: charged down to
    −credit limit, then written off, its counters exact."""
    from billing.services import meter_open

    org = OrganizationFactory()
    fund(org, 200_000)
    set_credit_limit(org, 100_000)  # 0.3 CNY available: less than the first 10 minutes of the H100
    volume, vmeter = volume_meter_backdated(org)
    imeter = meter_open(org=org, instance_id=__import__("uuid").uuid4(), item_index=0, accelerator="h100",
                        cards=1, rate=1_900_000, opened_at=vmeter.opened_at)
    t0 = vmeter.opened_at
    meter_tick(now=t0 + timedelta(seconds=600), watch=False)
    assert funds_watch(org_ids={org.pk}, now=t0 + timedelta(seconds=600))["stopped"] == [org.pk]
    imeter.refresh_from_db()
    vmeter.refresh_from_db()
    assert imeter.billable_until_seconds is not None
    assert vmeter.billable_until_seconds is None
    from billing.services import meters_close

    meters_close(instance_id=imeter.instance_id, at=t0 + timedelta(seconds=900))  # the auto-stop landed
    for day in range(1, 6):
        meter_tick(now=t0 + timedelta(days=day), watch=True)
    assert exact(vmeter) == PRICE * 100 * 5 * 86400 // 3600
    cash = Account.objects.get(organization=org, kind="cash").balance
    assert cash == -100_000  # spent to the credit limit, the rest written off
    assert vmeter.written_off_amount > 0 and vmeter.closed_at is None
    assert ledger_verify() == []


def test_grow_bills_each_second_on_the_size_it_had():
    org = OrganizationFactory()
    fund(org, 100_000_000)
    volume, meter = volume_meter_backdated(org, size_gib=100)
    t0 = meter.opened_at
    meter_tick(now=t0 + timedelta(hours=10), watch=False)
    volume_grow(org=org, volume_id=volume.pk, size_gib=300)
    meter.refresh_from_db()
    assert meter.closed_at is not None  # closed at the grow (now), billed to it on 100 GiB
    assert exact(meter) == PRICE * 100 * meter.posted_through_seconds // 3600
    grown = Meter.objects.get(instance_id=volume.pk, closed_at=None)
    assert (grown.cards, grown.rate, grown.subject) == (300, PRICE, "volume")
    volume.refresh_from_db()
    assert volume.size_gib == 300


def test_volumes_show_in_usage_and_in_the_statement(member_factory, token_client_for):
    from zoneinfo import ZoneInfo

    from django.conf import settings

    from billing.products.statements import statement_build

    owner = member_factory(role="owner")
    fund(owner.organization, 100_000_000)
    volume, meter = volume_meter_backdated(owner.organization)
    Meter.objects.filter(pk=meter.pk).update(opened_at=db_now() - timedelta(hours=10))
    meter_tick()
    month = db_now().astimezone(ZoneInfo(settings.BILLING_TIME_ZONE)).strftime("%Y-%m")
    line = next(u for u in statement_build(org=owner.organization, month=month).usage if u["meter_id"] == meter.pk)
    assert (line["subject"], line["instance_id"], line["cards"], line["rate"]) == ("volume", str(volume.pk), 100, PRICE)
    meter.refresh_from_db()
    assert meter.posted_through_seconds >= 36_000  # ten hours (and the seconds the test took) on 100 GiB
    assert line["amount"] == meter.posted_amount == PRICE * 100 * meter.posted_through_seconds // 3600
    rows = token_client_for(owner).get("/api/v1/billing/usage/").json()["results"]
    row = next(r for r in rows if r["meter_id"] == meter.pk)
    assert (row["subject"], row["instance_id"], row["accelerator"], row["cards"]) == ("volume", str(volume.pk),
                                                                                    "volume:disk", 100)


def test_the_reconciler_leaves_volume_meters_open():
    """Before: the reconciler's leaked-meter sweep took every open meter whose id is no running instance, a volume's
    included, so within a minute of creation a volume stopped being billed."""
    from provisioning.services.reconciler import reconcile

    org = OrganizationFactory()
    fund(org, 100_000_000, key="reconciler-volume")
    volume = make_volume(org, ZoneFactory(), name="kept", size_gib=100)
    assert reconcile()["meters_closed"] == 0
    assert Meter.objects.filter(instance_id=volume.pk, closed_at__isnull=True).exists()
