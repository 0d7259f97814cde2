"""The lifecycle through a real Celery worker process (PostgreSQL, Redis, SIMULATOR_DELAY_SCALE=0)."""
import time

import pytest

from billing.models import Meter
from inventory.models import CardAllocation
from provisioning.models import ReadinessReport
from tests.factories.provisioning import container_body, make_fleet, wait_for_cards_released, wait_for_state

# Worker start-up and the steps are slow on a loaded machine; pytest-timeout's default is 180 s.
pytestmark = [pytest.mark.worker, pytest.mark.redis, pytest.mark.timeout(600)]
URL = "/api/v1/instances/"
WORKER_ENV = {"SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0"}


def test_create_stop_start_terminate_through_the_worker(start_worker, client):
    worker = start_worker(extra_env=WORKER_ENV)
    make_fleet(h100=2)
    r = client.post(URL, container_body("h100-sxm-80g", 8), format="json")
    assert r.status_code == 201, r.json()
    iid = r.json()["id"]
    inst = wait_for_state(iid, "running", worker=worker)
    report = ReadinessReport.objects.get(instance_id=iid)
    assert report.passed and report.tool == "nccl-tests" and len(report.cards) == 8
    assert report.busbw_largest_gbps >= 235 and report.floor_gbps == 235
    meters = list(Meter.objects.filter(instance_id=iid, closed_at__isnull=True))
    assert [(m.item_index, m.cards, m.rate) for m in meters] == [(0, 8, 1_900_000)]

    time.sleep(1.2)  # at least one whole second of running
    assert client.post(f"{URL}{iid}/stop/").status_code == 202
    meter = Meter.objects.get(pk=meters[0].pk)
    # Closed to the second, in the stop request's own transaction, and charged exactly floor(rate×cards×S/3600).
    seconds = int((meter.closed_at - meter.opened_at).total_seconds())
    assert seconds >= 1
    assert meter.posted_amount + meter.written_off_amount == 1_900_000 * 8 * seconds // 3600
    wait_for_state(iid, "stopped", worker=worker)
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()

    r = client.post(f"{URL}{iid}/start/")
    assert r.status_code == 202 and r.json()["state"] == "provisioning"
    wait_for_state(iid, "running", worker=worker)
    assert ReadinessReport.objects.filter(instance_id=iid, passed=True).count() == 2  # re-checked
    assert Meter.objects.filter(instance_id=iid, closed_at__isnull=True).count() == 1
    assert sum(len(n["cards"]) for n in client.get(f"{URL}{iid}/").json()["nodes"]) == 8  # placed again

    assert client.delete(f"{URL}{iid}/").status_code == 202
    inst = wait_for_state(iid, "terminated", worker=worker)
    assert inst.terminated_at is not None
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()
    assert not Meter.objects.filter(instance_id=iid, closed_at__isnull=True).exists()
    assert client.delete(f"{URL}{iid}/").status_code == 202  # idempotent


def test_hybrid_gets_both_tools_and_two_meters(start_worker, client):
    worker = start_worker(extra_env=WORKER_ENV)
    make_fleet(h800=1, ascend=1)
    body = {"name": "hybrid", "kind": "container",
            "items": [{"accelerator": "ascend-910b", "count": 8}, {"accelerator": "h800-sxm-80g", "count": 8}],
            "images": {"nvidia": "pytorch-2.3-cuda12.3", "huawei": "cann-torch-npu"}}
    r = client.post(URL, body, format="json")
    assert r.status_code == 201, r.json()
    assert r.json()["price_per_hour"] == "73.600000"  # 8 × 2.40 + 8 × 6.80
    iid = r.json()["id"]
    wait_for_state(iid, "running", worker=worker)
    reports = client.get(f"{URL}{iid}/readiness/").json()["results"]
    # Each part's own test, and the TCP probe between the parts (one cluster per instance).
    assert sorted(x["tool"] for x in reports) == ["hccl_test", "nccl-tests", "tcp"]
    assert all(x["passed"] for x in reports)
    assert all(x["busbw_gbps"] >= x["floor_gbps"] for x in reports if x["tool"] != "tcp")
    meters = Meter.objects.filter(instance_id=iid, closed_at__isnull=True).order_by("item_index")
    assert [(m.accelerator, m.cards, m.rate) for m in meters] == [("ascend-910b", 8, 2_400_000),
                                                                 ("h800-sxm-80g", 8, 6_800_000)]


def test_readiness_failure_twice_fails_the_instance_in_the_worker(start_worker, client):
    from provisioning.services.fleet import fault_force

    worker = start_worker(extra_env=WORKER_ENV)
    node = make_fleet(h100=1)[0]
    fault_force(node=node, operation="readiness", faults=["data_errors"], times=None)
    iid = client.post(URL, container_body("h100-sxm-80g", 4), format="json").json()["id"]
    wait_for_state(iid, "failed", worker=worker)
    # The instance's two attempts; the released cards' second pass (scope second_pass) runs after, in its own task.
    assert ReadinessReport.objects.filter(instance_id=iid, passed=False).exclude(scope="second_pass").count() == 2
    wait_for_cards_released(iid, worker=worker)
    assert not Meter.objects.filter(instance_id=iid).exists()


def test_worker_killed_after_claim_resumes_in_a_new_worker(start_worker, client):
    from provisioning.tasks import instance_advance

    crashing = start_worker(extra_env={**WORKER_ENV, "CARDMIX_FAILPOINT": "provision:after_claim"})
    make_fleet(h100=1)
    iid = client.post(URL, container_body("h100-sxm-80g", 4), format="json").json()["id"]
    deadline = time.time() + 120
    while "signal 9" not in crashing.log_tail(20000) and time.time() < deadline:
        time.sleep(0.2)
    assert "signal 9" in crashing.log_tail(20000), crashing.log_tail()
    crashing.kill()
    inst = wait_for_state(iid, "provisioning")
    assert CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).count() == 4  # nothing lost
    worker = start_worker(extra_env=WORKER_ENV)
    instance_advance.delay(iid)  # what the reconciler does for an instance past its step deadline
    wait_for_state(iid, "running", worker=worker)
    assert Meter.objects.filter(instance_id=iid, closed_at__isnull=True).count() == 1
    assert inst.step_deadline is not None
