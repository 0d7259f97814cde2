"""cost_so_far is exact to the second, not to the last tick: the list (computed in SQL), the detail and the
console (computed in Python) agree with floor(rate × cards × seconds / 3600) and with what the tick then posts."""
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.models import Meter
from billing.rating import cumulative_charge
from billing.selectors import instance_costs
from billing.tick import meter_tick
from core.dbclock import db_now
from provisioning.selectors import INSTANCE_BODY_COLUMNS, instance_list_rows
from tests.factories.billing import MeterFactory
from tests.factories.provisioning import InstanceFactory

pytestmark = [pytest.mark.pg, pytest.mark.django_db]
URL = "/api/v1/instances/"
# Meters open half a second off a second boundary: the few milliseconds between the test's clock read and
# the request's never cross a whole second, so the expected value is exact.
HALF = timedelta(milliseconds=500)


def costs_seen(client, instance):
    listed = {r["id"]: r["cost_so_far"] for r in client.get(f"{URL}?limit=100").json()["results"]}
    return listed[str(instance.pk)], client.get(f"{URL}{instance.pk}/").json()["cost_so_far"]


def test_running_instance_costs_to_the_second_in_list_and_detail(client, owner):
    inst = InstanceFactory(organization=owner.organization, state="running")
    opened = db_now() - timedelta(seconds=3600) - HALF
    MeterFactory(organization=owner.organization, instance_id=inst.pk, cards=2, rate=1_900_000, opened_at=opened)
    MeterFactory(organization=owner.organization, instance_id=inst.pk, item_index=1, cards=1, rate=2_400_000,
                 opened_at=opened + timedelta(seconds=1800))
    # Nothing posted yet: 2 × 1.9 CNY for an hour plus 2.4 CNY for half an hour.
    assert costs_seen(client, inst) == ("5.000000", "5.000000")

    meter_tick()  # posting changes where the money is, not what the customer sees
    posted = sum(Meter.objects.filter(instance_id=inst.pk).values_list("posted_amount", flat=True))
    assert posted == cumulative_charge(1_900_000, 2, 3600) + cumulative_charge(2_400_000, 1, 1800) == 5_000_000
    assert costs_seen(client, inst) == ("5.000000", "5.000000")


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
    python = instance_costs([inst.pk])[inst.pk]
    (row,) = instance_list_rows(org=org)[0:1]  # the list's one statement, costs computed in SQL
    assert row[INSTANCE_BODY_COLUMNS.index("body_cost")] == python
    expected = accounted - written
    if not closed:
        seconds = age if cap is None else min(age, max(cap, through))
        expected += max(cumulative_charge(rate, cards, max(seconds, through)) - accounted, 0)
    assert python == expected
    Meter.objects.filter(pk=meter.pk).delete()
    inst.delete()
