"""The simulated storage driver: attached volumes in all-simulated zones fill plausibly (never past their fill
fraction, never shrinking); detached ones keep their figure; zones with agent nodes are left to the agents."""
from datetime import timedelta
from decimal import Decimal

import pytest

from core.dbclock import db_now
from storage.services import volume_attach, volume_detach
from storage.simulated import simulated_usage_gib, volumes_usage_simulate
from tests.factories.billing import fund
from tests.factories.inventory import NodeFactory, ZoneFactory
from tests.factories.storage import make_volume
from tests.factories.tenancy import OrganizationFactory

pytestmark = pytest.mark.django_db


def test_usage_climbs_toward_a_stable_fraction_and_never_shrinks():
    seen = [simulated_usage_gib(volume_id="v", size_gib=1000, attached_hours=h, current=Decimal(0))
            for h in (0, 1, 6, 24, 240)]
    assert seen == sorted(seen) and seen[0] == 0
    assert Decimal(350) <= seen[-1] <= Decimal(850)
    assert simulated_usage_gib(volume_id="v", size_gib=1000, attached_hours=1, current=Decimal(999)) == 999


def test_only_attached_volumes_of_simulated_zones_change():
    org = OrganizationFactory()
    fund(org, 100_000_000)
    sim, real = ZoneFactory(), ZoneFactory()
    NodeFactory(zone=sim)
    NodeFactory(zone=real, driver="agent")
    a = make_volume(org, sim, name="sim-attached", size_gib=200)
    b = make_volume(org, sim, name="sim-free", size_gib=200)
    c = make_volume(org, real, name="agent-attached", size_gib=200)
    iid = __import__("uuid").uuid4()
    volume_attach(org=org, volume_id=a.pk, instance_id=iid, zone_id=sim.pk)
    volume_attach(org=org, volume_id=c.pk, instance_id=__import__("uuid").uuid4(), zone_id=real.pk)
    assert volumes_usage_simulate(now=db_now() + timedelta(hours=12)) == 1
    for v in (a, b, c):
        v.refresh_from_db()
    assert Decimal(50) < a.usage_gib < Decimal(170) and not a.over_quota
    assert b.usage_gib == 0 and c.usage_gib == 0
    volume_detach(org=org, volume_id=a.pk, instance_id=iid)
    kept = a.usage_gib
    volumes_usage_simulate(now=db_now() + timedelta(hours=48))
    a.refresh_from_db()
    assert a.usage_gib == kept
