"""`ours` learns its workload from the requests the platform has seen: recent instances, decayed by age, and the
waitlist, read from the database."""
from datetime import timedelta

import pytest

from core.dbclock import db_now
from inventory.models import Accelerator
from provisioning.models import Instance
from provisioning.services.demand import demand_learn, demand_workload
from tests.factories.provisioning import InstanceFactory

pytestmark = pytest.mark.django_db
H100, ASCEND = "h100-sxm-80g", "ascend-910b"


def test_recent_requests_weigh_by_age_and_the_waitlist_counts_in_full(settings):
    settings.PLACEMENT_DEMAND_HALF_LIFE_HOURS = 1.0
    assert demand_learn() is None  # nothing seen: the engine's default
    InstanceFactory(items=[{"accelerator": H100, "count": 8}], state="running")
    old = InstanceFactory(items=[{"accelerator": ASCEND, "count": 1}], state="terminated")
    Instance.objects.filter(pk=old.pk).update(created_at=db_now() - timedelta(hours=2))  # weighs 1/4
    waiting = InstanceFactory(items=[], policy={"total_cards": 2, "compatible_vendors": ["huawei"]},
                              state="waitlisted")
    Instance.objects.filter(pk=waiting.pk).update(created_at=db_now() - timedelta(days=30))  # waiting: full weight
    workload = demand_learn()
    total = 1 + 0.25 + 1
    assert workload.sizes == pytest.approx({8: 1 / total, 1: 0.25 / total, 2: 1 / total}, rel=1e-3)
    huawei = frozenset(Accelerator.objects.filter(vendor="huawei").values_list("slug", flat=True))
    assert ASCEND in huawei
    expected = {frozenset({H100}): 1 / total, frozenset({ASCEND}): 0.25 / total}
    expected[huawei] = expected.get(huawei, 0) + 1 / total  # the policy accepts any huawei accelerator
    assert workload.constrained == pytest.approx(expected, rel=1e-3)


def test_a_bare_metal_request_counts_as_its_whole_nodes():
    InstanceFactory(kind="bare_metal", items=[{"accelerator": H100, "count": 16}], state="running")
    workload = demand_learn()
    assert workload.sizes == {8: 1.0}
    assert workload.constrained == {frozenset({H100}): 1.0}


def test_a_worker_reads_the_demand_once_per_refresh_period(settings, django_assert_num_queries):
    settings.PLACEMENT_DEMAND_REFRESH_SECONDS = 3600
    InstanceFactory(items=[{"accelerator": H100, "count": 4}], state="running")
    first = demand_workload()
    InstanceFactory(items=[{"accelerator": H100, "count": 1}], state="running")
    with django_assert_num_queries(0):
        assert demand_workload() is first  # cached: a decision does not pay for it
    settings.PLACEMENT_DEMAND_REFRESH_SECONDS = 0
    assert demand_workload().sizes == pytest.approx({4: 0.5, 1: 0.5}, rel=1e-3)
