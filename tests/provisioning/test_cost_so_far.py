"""cost_so_far is exact to the second, not to the last tick: the list (computed in SQL), the detail and the
console (computed in Python) agree with floor(rate × cards × seconds / 3600) and with what the tick then posts."""
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.models import Meter
from billing.rating import cumulative_charge, whole_seconds
from billing.selectors import instance_costs
from billing.tick import meter_tick
from core.dbclock import db_now, db_time
from core.money import format_ucny
from provisioning.api.rows import InstanceRow
from provisioning.selectors import instance_list_rows
from tests.factories.billing import MeterFactory
from tests.factories.provisioning import InstanceFactory

pytestmark = pytest.mark.django_db
URL = "/api/v1/instances/"
HALF = timedelta(milliseconds=500)  # meters open mid-second


def costs_seen(client, instance):
    listed = {r["id"]: r["cost_so_far"] for r in client.get(f"{URL}?limit=100").json()["results"]}
    return listed[str(instance.pk)], client.get(f"{URL}{instance.pk}/").json()["cost_so_far"]


def test_running_instance_costs_to_the_second_in_list_and_detail(client, owner):
    inst = InstanceFactory(organization=owner.organization, state="running")
    opened = db_now() - timedelta(seconds=3600) - HALF
    MeterFactory(organization=owner.organization, instance_id=inst.pk, cards=2, rate=1_900_000, opened_at=opened)
    # The second item is capped (auto-stop second 1800), so its part is fixed: 2.4 CNY for half an hour.
    MeterFactory(organization=owner.organization, instance_id=inst.pk, item_index=1, cards=1, rate=2_400_000,
                 opened_at=opened, billable_until_seconds=1800)

    def window(before, after) -> set[str]:
        """What the API may answer for a request between these clock reads (a loaded machine is slow)."""
        seconds = range(whole_seconds(opened, before), whole_seconds(opened, after) + 1)
        return {format_ucny(cumulative_charge(1_900_000, 2, s) + 1_200_000) for s in seconds}

    before = db_now()
    listed, detail = costs_seen(client, inst)
    allowed = window(before, db_now())
    assert listed in allowed and detail in allowed and "5.000000" in window(before, before)  # nothing posted yet

    at = opened + timedelta(seconds=3600, milliseconds=700)
    meter_tick(now=at)  # posting changes where the money is, not what the customer sees
    posted = sum(Meter.objects.filter(instance_id=inst.pk).values_list("posted_amount", flat=True))
    assert posted == cumulative_charge(1_900_000, 2, 3600) + cumulative_charge(2_400_000, 1, 1800) == 5_000_000
    before = db_now()
    listed, detail = costs_seen(client, inst)
    allowed = window(before, db_now())
    assert listed in allowed and detail in allowed


def test_auto_stopped_seconds_and_closed_meters_add_nothing(client, owner):
    inst = InstanceFactory(organization=owner.organization, state="running")
    MeterFactory(organization=owner.organization, instance_id=inst.pk, cards=4, rate=3_600_000,
                 opened_at=db_now() - timedelta(seconds=600) - HALF, billable_until_seconds=100)
    closed = MeterFactory(organization=owner.organization, instance_id=inst.pk, item_index=1, cards=1,
                          rate=3_600_000, opened_at=db_now() - timedelta(days=1), posted_through_seconds=10,
                          posted_amount=10_000)
    Meter.objects.filter(pk=closed.pk).update(closed_at=closed.opened_at + timedelta(seconds=10))
    # 100 billable seconds × 4 cards × 1 000 µCNY/s, plus the closed meter's 0.01 CNY; nothing for the rest.
    assert costs_seen(client, inst) == ("0.410000", "0.410000")


def test_a_monthly_instance_costs_its_charged_package_periods(client, owner):
    from billing.credits import cash_credit
    from billing.products.packages import package_start
    from tests.factories.billing_products import H100, package_amount

    inst = InstanceFactory(organization=owner.organization, state="running", billing="monthly")
    cash_credit(org=owner.organization, amount=package_amount(H100), key=f"k:{inst.pk}", code="topup")
    package_start(org=owner.organization, instance_id=inst.pk, items=[H100])
    charged = format_ucny(package_amount(H100))  # 720 h × 2 cards × 1.235 CNY = 1778.4 CNY
    assert costs_seen(client, inst) == (charged, charged) == ("1778.400000", "1778.400000")
    assert instance_costs([inst.pk]) == {inst.pk: package_amount(H100)}
    # After the package, on-demand metering adds to it.
    MeterFactory(organization=owner.organization, instance_id=inst.pk, cards=1, rate=3_600_000,
                 opened_at=db_now() - timedelta(days=2), posted_through_seconds=10, posted_amount=10_000)
    Meter.objects.filter(instance_id=inst.pk).update(closed_at=db_now() - timedelta(days=1))
    assert costs_seen(client, inst) == ("1778.410000", "1778.410000")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rate=st.integers(0, 60_000_000), cards=st.integers(1, 64), age=st.integers(0, 90 * 86400),
       posted_share=st.floats(0, 1), written_share=st.floats(0, 1), cap=st.one_of(st.none(), st.integers(0, 10**7)),
       closed=st.booleans())
def test_sql_and_python_costs_agree_to_the_microcny(owner, rate, cards, age, posted_share, written_share, cap,
                                                    closed):
    org = owner.organization
    inst = InstanceFactory(organization=org, state="running")
    through = int(age * posted_share)
    accounted = cumulative_charge(rate, cards, through)
    written = int(accounted * written_share)
    meter = MeterFactory(organization=org, instance_id=inst.pk, cards=cards, rate=rate,
                         opened_at=db_now() - timedelta(seconds=age) - HALF, posted_through_seconds=through,
                         posted_amount=accounted - written, written_off_amount=written,
                         billable_until_seconds=None if cap is None else max(cap, through))
    if closed:
        Meter.objects.filter(pk=meter.pk).update(closed_at=meter.opened_at + timedelta(seconds=through))
    row = InstanceRow._make(instance_list_rows(org=org).get())  # the list's statement, costs computed in SQL
    statement_now = db_time(row.now)  # that statement's clock
    python = instance_costs([inst.pk], now=statement_now)[inst.pk]
    assert row.cost == python
    expected = accounted - written
    if not closed:
        age = whole_seconds(meter.opened_at, statement_now)  # age, unless the machine took a second
        seconds = age if cap is None else min(age, max(cap, through))
        expected += max(cumulative_charge(rate, cards, max(seconds, through)) - accounted, 0)
    assert python == expected
    Meter.objects.filter(pk=meter.pk).delete()
    inst.delete()
