"""SLA, quarantine, waitlist, crash recovery and auto-stop through a real Celery worker process.

Nothing here calls a step directly: the test makes requests or queues the beat's tasks, and the
worker (SIMULATOR_DELAY_SCALE=0) does the rest. Faults are forced per node with SimulatedFault rows;
crashes with CARDMIX_FAILPOINT; deadlines are moved on the rows.
"""
import time

import pytest

from billing.funds import available_funds
from billing.models import Meter, MeterCharge, WriteOff
from billing.rating import whole_seconds
from billing.tasks import meter_tick_task
from billing.verify import ledger_verify
from inventory.models import Card, CardAllocation, Image, Node
from provisioning.choices import PROVISIONED_WARM
from provisioning.drivers.base import key_fingerprint
from provisioning.models import CardRetest, Instance, InstanceEvent, NodeGroup, WarmNode, WarmPool
from provisioning.platform_keys import authorized_keys
from provisioning.services.fleet import fault_force
from provisioning.services.reconciler import reconcile
from provisioning.services.sla import sla_settle_due
from provisioning.services.warm_pool import warm_pool_status
from provisioning.tasks import expire_due_task, reconcile_task, sla_settle_due_task, warm_pools_refill_task
from tests.factories.provisioning import (
    container_body,
    funded,
    make_fleet,
    wait_for_cards_released,
    wait_for_state,
)

from .helpers import HOUR, SECOND, URL, WORKER_ENV, hours, leaks, set_ago, sla_transfers

pytestmark = [pytest.mark.worker, pytest.mark.redis]


def _create(client, count=8, **extra) -> str:
    r = client.post(URL, container_body("h100-sxm-80g", count, **extra), format="json")
    assert r.status_code in (201, 202), r.json()
    return r.json()["id"]


def _until(check, timeout=30.0, worker=None, what=""):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}\n{worker.log_tail() if worker else ''}")


def _node_of(iid) -> Node:
    return NodeGroup.objects.select_related("node").get(instance_id=iid, released_at__isnull=True).node


def test_sla_task_twice_in_the_worker_grants_one_transfer(start_worker, client):
    worker = start_worker(extra_env=WORKER_ENV)
    make_fleet(h100=1)
    iid = _create(client, count=2)
    inst = wait_for_state(iid, "running", worker=worker)
    Instance.objects.filter(pk=iid).update(sla_deadline=inst.ready_at - HOUR - SECOND)  # 60 min 1 s late
    sla_settle_due_task.delay()
    sla_settle_due_task.delay()
    worker.wait_ready()  # one process, tasks in order: both SLA runs are done
    inst.refresh_from_db()
    assert [t.amount for t in sla_transfers(inst)] == [hours(2, cards=2)]
    assert inst.sla_compensation == hours(2, cards=2)
    assert client.get(f"{URL}{iid}/").json()["sla"]["compensation"] == "7.600000"


def test_readiness_failing_twice_quarantines_the_node_and_runs_elsewhere(start_worker, client):
    make_fleet(h100=2)
    iid = _create(client)  # queued: no worker yet, so the fault can target the chosen node
    bad = _node_of(iid)
    fault_force(node=bad, operation="readiness", faults=["data_errors"])
    worker = start_worker(extra_env=WORKER_ENV)
    inst = wait_for_state(iid, "running", worker=worker)
    # The release queued the cards' second pass in the worker; it fails too, so the node is quarantined.
    retest = _until(lambda: CardRetest.objects.filter(node=bad, state="failed").first(), worker=worker,
                    what="the failed second pass")
    bad.refresh_from_db()
    assert bad.state == "quarantined" and "second pass failed" in bad.state_reason
    assert f"report #{retest.first_report_id}" in bad.state_reason
    assert f"report #{retest.second_report_id}" in bad.state_reason
    assert inst.replacements == 1 and _node_of(iid).pk != bad.pk
    assert not CardAllocation.objects.filter(card__node=bad, released_at__isnull=True).exists()
    assert Meter.objects.filter(instance_id=iid, closed_at__isnull=True).count() == 1


def test_third_failure_ends_failed_with_cards_released_and_compensation(start_worker, client):
    nodes = make_fleet(h100=3)
    for node in nodes:
        fault_force(node=node, operation="readiness", faults=["low_bandwidth"])
    worker = start_worker(extra_env=WORKER_ENV)
    iid = _create(client, count=4)
    inst = wait_for_state(iid, "failed", worker=worker)
    assert inst.replacements == 2
    _until(lambda: CardRetest.objects.filter(state="failed").count() == 3, worker=worker, what="three second passes")
    assert set(Node.objects.values_list("state", flat=True)) == {"quarantined"}
    wait_for_cards_released(iid, worker=worker)
    # The failure dispatched the SLA settlement: a failure before the deadline is worth one hour.
    _until(lambda: sla_transfers(inst), worker=worker, what="the compensation transfer")
    assert [t.amount for t in sla_transfers(inst)] == [hours(1, cards=4)]
    assert Meter.objects.filter(instance_id=iid).count() == 0  # never billed


def test_cards_failing_readiness_pass_their_second_pass_in_the_worker_and_return(start_worker, client):
    make_fleet(h100=2)
    iid = _create(client)
    bad = _node_of(iid)
    fault_force(node=bad, operation="readiness", faults=["data_errors"], times=2)  # the check's two attempts only
    worker = start_worker(extra_env=WORKER_ENV)
    inst = wait_for_state(iid, "running", worker=worker)
    assert inst.replacements == 1
    retest = _until(lambda: CardRetest.objects.filter(node=bad, state="passed").first(), worker=worker,
                    what="the passed second pass")
    assert retest.second_report.passed and not retest.first_report.passed
    bad.refresh_from_db()
    assert bad.state == "available"
    assert set(Card.objects.filter(node=bad).values_list("health", flat=True)) == {"ok"}
    # Back in the pool: the next create may land on it.
    other = _create(client)
    wait_for_state(other, "running", worker=worker)
    assert _node_of(other).pk == bad.pk


def test_a_warm_pool_of_two_serves_a_bare_metal_create_without_boot_and_refills(start_worker, client):
    nodes = make_fleet(h100=3)
    pool = WarmPool.objects.create(zone=nodes[0].zone, accelerator=nodes[0].accelerator, size=2,
                                   image=Image.objects.get(slug="pytorch-2.3-cuda12.3"))
    worker = start_worker(extra_env=WORKER_ENV)
    warm_pools_refill_task.delay()  # a beat tick
    _until(lambda: warm_pool_status(pool)[0] == 2, worker=worker, what="two warm nodes")
    warm = set(WarmNode.objects.values_list("node_id", flat=True))
    body = {**container_body("h100-sxm-80g", 8), "kind": "bare_metal"}
    r = client.post(URL, body, format="json")
    assert r.status_code in (201, 202), r.json()
    iid = r.json()["id"]
    wait_for_state(iid, "running", worker=worker)
    group = NodeGroup.objects.get(instance_id=iid)
    assert group.warm and group.node_id in warm and group.prepare_attempts == 0  # no boot, no image step
    # The hand-over put the instance's keys (the platform's: it was created without one) on the node first.
    [key] = authorized_keys(Instance.objects.get(pk=iid))
    assert group.keys_installed_at is not None and key_fingerprint(key) in group.prepare_output
    reasons = [e["reason"] for e in client.get(f"{URL}{iid}/events/").json()["results"]]
    assert PROVISIONED_WARM in reasons and "provisioned" not in reasons
    # The take queued a refill: the third node is deployed and verified, without waiting for the beat.
    _until(lambda: warm_pool_status(pool)[0] == 2, worker=worker, what="the pool refilled")
    assert group.node_id not in set(WarmNode.objects.values_list("node_id", flat=True))
    _until(lambda: WarmPool.objects.get(pk=pool.pk).refill_state == "idle", worker=worker, what="an idle pool")


def test_waitlisted_instance_runs_after_another_stops_and_expiry_terminates(start_worker, client):
    worker = start_worker(extra_env=WORKER_ENV)
    make_fleet(h100=1)
    first = _create(client)
    wait_for_state(first, "running", worker=worker)
    waiting = _create(client, waitlist=True)
    later = _create(client, waitlist=True)
    assert Instance.objects.get(pk=waiting).state == "waitlisted"
    assert [client.get(f"{URL}{i}/").json()["waitlist_position"] for i in (waiting, later)] == [1, 2]
    assert client.post(f"{URL}{first}/stop/").status_code == 202
    # Nobody calls anything: stop → cards released → capacity listener → wake task → provisioning → running.
    inst = wait_for_state(waiting, "running", worker=worker)
    assert inst.sla_deadline is not None
    woken = InstanceEvent.objects.get(instance_id=waiting, from_state="waitlisted")
    assert inst.sla_event_id == woken.pk  # the SLA window starts at the wake-up
    assert client.get(f"{URL}{later}/").json()["waitlist_position"] == 1
    set_ago(later, expires_at=SECOND)
    expire_due_task.delay()
    inst = wait_for_state(later, "terminated", worker=worker)
    assert InstanceEvent.objects.filter(instance_id=later, to_state="terminating", reason="waitlist_expired").exists()


@pytest.mark.parametrize("point", ["provision:after_claim", "provision:after_driver", "provision:before_meter"])
def test_worker_killed_at_a_failpoint_then_reconciler_leaves_nothing_leaked(start_worker, client, point):
    crashing = start_worker(extra_env={**WORKER_ENV, "CARDMIX_FAILPOINT": point})
    make_fleet(h100=1)
    iid = _create(client, count=4)
    _until(lambda: "signal 9" in crashing.log_tail(50000), worker=crashing, what=f"a crash at {point}")
    crashing.kill()
    assert CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).count() == 4
    assert not Meter.objects.filter(instance_id=iid).exists()
    worker = start_worker(extra_env=WORKER_ENV)
    set_ago(iid, step_deadline=SECOND)  # past its step deadline: the reconciler's business now
    reconcile_task.delay()
    wait_for_state(iid, "running", worker=worker)
    assert leaks() == {"cards": [], "meters": []}
    [meter] = Meter.objects.filter(instance_id=iid)  # one meter: opened once
    time.sleep(1.1)
    assert client.post(f"{URL}{iid}/stop/").status_code == 202
    wait_for_state(iid, "stopped", worker=worker)
    meter.refresh_from_db()
    charged = sum(MeterCharge.objects.filter(meter_id=meter.pk).values_list("amount", flat=True))
    assert charged == meter.posted_amount  # every posting once
    assert meter.posted_amount + meter.written_off_amount == (
        meter.rate * meter.cards * whole_seconds(meter.opened_at, meter.closed_at) // 3600)
    assert leaks() == {"cards": [], "meters": []}
    assert reconcile() == {"resumed": 0, "failed": 0, "forced": 0, "cards_released": 0, "meters_closed": 0,
                           "package_ends": 0, "containers_released": 0}
    assert ledger_verify() == []


def test_funds_exhausted_during_a_run_stops_and_writes_off_the_rest(start_worker, member_factory,
                                                                    session_client_for, settings):
    settings.FUNDS_MIN_MINUTES = 0  # let a nearly empty organization start (the check runs in this process)
    membership = funded(member_factory(role="owner"), amount=1_000)  # ≈ 1.9 s of one H100 card
    client = session_client_for(membership)
    org = membership.organization
    worker = start_worker(extra_env=WORKER_ENV)
    make_fleet(h100=1)
    iid = _create(client, count=1)
    wait_for_state(iid, "running", worker=worker)
    time.sleep(3.2)
    meter_tick_task.delay()  # what beat does every minute; the worker does the rest
    wait_for_state(iid, "stopped", worker=worker)
    stop = InstanceEvent.objects.get(instance_id=iid, from_state="running")
    assert stop.to_state == "stopping" and "funds_exhausted" in stop.reason
    meter = Meter.objects.get(instance_id=iid)
    seconds = whole_seconds(meter.opened_at, meter.closed_at)
    assert seconds >= 3
    charged = sum(MeterCharge.objects.filter(meter_id=meter.pk).values_list("amount", flat=True))
    assert charged == meter.posted_amount == 1_000  # the ledger: everything the funds covered, up to the stop
    written = sum(WriteOff.objects.filter(meter=meter).values_list("amount", flat=True))
    assert written == meter.written_off_amount > 0  # the write-off rows: the rest
    assert charged + written == 1_900_000 * seconds // 3600
    assert available_funds(org) == 0
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()
    assert ledger_verify() == []


def test_reconciler_in_the_worker_fails_an_instance_that_cannot_resume(start_worker, client):
    from config.celery import app

    make_fleet(h100=1)
    iid = _create(client, count=2)
    app.control.purge()  # this run's queue only: the step task is lost, as if the broker dropped it
    # Already re-dispatched once and still stuck past its step deadline: roll back.
    Instance.objects.filter(pk=iid).update(step_retries=1)
    set_ago(iid, step_deadline=SECOND)
    worker = start_worker(extra_env=WORKER_ENV)
    reconcile_task.delay()
    inst = _until(lambda: Instance.objects.filter(pk=iid, state="failed").first(), worker=worker,
                  what="the reconciler's failure")
    assert "stuck in provisioning" in inst.state_reason
    wait_for_cards_released(iid, worker=worker)
    # (The failure-dispatched settlement in the worker is covered above; the beat's sweep is the backstop.)
    sla_settle_due()
    assert [t.amount for t in sla_transfers(inst)] == [hours(1, cards=2)]
    assert leaks() == {"cards": [], "meters": []}
