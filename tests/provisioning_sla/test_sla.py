"""SLA compensation (SPEC §3): lateness edges, failure, early termination, once per breach id.

The steps run in this process (instance_advance called directly); the same paths through a real
worker process are in test_worker.py. Deadlines are moved on the row, never the clock.
"""
from datetime import timedelta

import pytest

from billing.models import Account, Transfer
from core.metrics import SLA_BREACHES_TOTAL
from provisioning.models import Instance
from provisioning.services.fleet import fault_force
from provisioning.services.sla import sla_hours, sla_settle, sla_settle_due
from provisioning.tasks import instance_advance
from tests.factories.provisioning import container_body, make_fleet

from .helpers import HOUR, SECOND, URL, hours, set_ago, sla_transfers

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("lateness", "expected"), [
    (SECOND, 1), (timedelta(microseconds=1), 1), (HOUR, 1), (HOUR + SECOND, 2),
    (HOUR + timedelta(microseconds=1), 2), (3 * HOUR, 3), (-HOUR, 1), (timedelta(0), 1),
])
def test_sla_hours_rounds_up_to_whole_hours_at_least_one(lateness, expected):
    assert sla_hours(lateness) == expected


def _running(client, cards=2) -> Instance:
    make_fleet(h100=1)
    r = client.post(URL, container_body("h100-sxm-80g", cards), format="json")
    assert r.status_code == 201, r.json()
    assert instance_advance(r.json()["id"]) == "running"
    return Instance.objects.get(pk=r.json()["id"])


@pytest.mark.parametrize(("late_by", "hours_owed"), [
    (SECOND, 1),                 # 1 s late → 1 h
    (HOUR, 1),                   # exactly 60 min late → 1 h
    (HOUR + SECOND, 2),          # 60 min 1 s → 2 h
])
def test_late_running_is_compensated_per_started_hour(client, owner, late_by, hours_owed,
                                                      django_capture_on_commit_callbacks):
    inst = _running(client, cards=2)
    assert inst.sla_event_id is not None and inst.ready_at <= inst.sla_deadline
    # The instance became ready `late_by` after its deadline.
    Instance.objects.filter(pk=inst.pk).update(sla_deadline=inst.ready_at - late_by)
    before = SLA_BREACHES_TOTAL._value.get()
    with django_capture_on_commit_callbacks(execute=True):
        assert sla_settle_due() == 1
        assert sla_settle_due() == 0  # the task run twice grants once
    inst.refresh_from_db()
    [transfer] = sla_transfers(inst)
    assert transfer.amount == hours(hours_owed, cards=2) == inst.sla_compensation
    assert transfer.credit_account.kind == "compensation"
    assert Account.objects.get(organization=owner.organization, kind="compensation").balance == transfer.amount
    assert SLA_BREACHES_TOTAL._value.get() == before + 1
    sla = client.get(f"{URL}{inst.pk}/").json()["sla"]
    assert sla["breached"] is True and sla["compensation"] == f"{hours(hours_owed, 2) / 1e6:.6f}"


def test_on_time_running_is_settled_without_compensation(client):
    inst = _running(client)
    assert sla_settle(instance_id=inst.pk) == 0
    assert sla_settle(instance_id=inst.pk) is None  # settled already
    assert sla_transfers(inst) == []
    sla = client.get(f"{URL}{inst.pk}/").json()["sla"]
    assert sla == {"deadline": sla["deadline"], "breached": False, "compensation": None}


def test_start_opens_a_new_window_with_its_own_breach_id(client):
    inst = _running(client, cards=1)
    Instance.objects.filter(pk=inst.pk).update(sla_deadline=inst.ready_at - SECOND)
    assert sla_settle(instance_id=inst.pk) == hours(1, 1)
    first_breach = inst.sla_event_id
    client.post(f"{URL}{inst.pk}/stop/")
    instance_advance(inst.pk)
    assert client.post(f"{URL}{inst.pk}/start/").status_code == 202
    inst.refresh_from_db()
    assert inst.sla_event_id != first_breach
    assert client.get(f"{URL}{inst.pk}/").json()["sla"]["compensation"] is None  # the new window: nothing yet
    assert instance_advance(inst.pk) == "running"
    assert sla_settle(instance_id=inst.pk) == 0  # on time this time
    assert len(sla_transfers(inst)) == 0


def test_terminated_by_the_customer_before_the_deadline_is_no_breach(client):
    make_fleet(h100=1)
    iid = client.post(URL, container_body("h100-sxm-80g", 1), format="json").json()["id"]
    assert client.delete(f"{URL}{iid}/").status_code == 202
    assert instance_advance(iid) == "terminated"
    assert sla_settle_due() == 0
    inst = Instance.objects.get(pk=iid)
    assert inst.sla_settled_event_id == inst.sla_event_id and inst.sla_compensation == 0
    assert sla_transfers(inst) == []


def test_terminated_after_the_deadline_while_still_provisioning_is_a_breach(client):
    make_fleet(h100=1)
    iid = client.post(URL, container_body("h100-sxm-80g", 1), format="json").json()["id"]
    set_ago(iid, sla_deadline=HOUR + 5 * SECOND)  # 1 h 5 s (and a little) late at the termination request
    assert sla_settle(instance_id=iid) is None  # still provisioning: lateness not known yet
    assert client.delete(f"{URL}{iid}/").status_code == 202
    assert sla_settle(instance_id=iid) == hours(2, 1)


def test_failure_before_the_deadline_is_compensated_one_hour(client):
    node = make_fleet(h100=1)[0]
    fault_force(node=node, operation="readiness", faults=["data_errors"])
    iid = client.post(URL, container_body("h100-sxm-80g", 4), format="json").json()["id"]
    assert instance_advance(iid) == "failed"  # the only node is quarantined; nowhere to re-place
    assert sla_settle_due() == 1
    inst = Instance.objects.get(pk=iid)
    assert [t.amount for t in sla_transfers(inst)] == [hours(1, 4)]


def test_failure_two_hours_after_the_deadline_is_compensated_three_hours(client):
    node = make_fleet(h100=1)[0]
    fault_force(node=node, operation="readiness", faults=["low_bandwidth"])
    iid = client.post(URL, container_body("h100-sxm-80g", 2), format="json").json()["id"]
    set_ago(iid, sla_deadline=2 * HOUR)
    assert instance_advance(iid) == "failed"
    inst = Instance.objects.get(pk=iid)
    assert inst.replacements == 0  # the window was closed: no re-placement
    assert sla_settle(instance_id=iid) == hours(3, 2)
    assert client.get(f"{URL}{iid}/").json()["sla"]["breached"] is True


def _restart(client, iid):
    assert client.post(f"{URL}{iid}/stop/").status_code == 202
    assert instance_advance(iid) == "stopped"
    r = client.post(f"{URL}{iid}/start/")
    assert r.status_code == 202, r.json()
    return r.json()


def test_a_late_window_is_compensated_when_the_customer_restarts_before_the_beat(client, owner):
    inst = _running(client, cards=2)
    Instance.objects.filter(pk=inst.pk).update(sla_deadline=inst.ready_at - SECOND)  # ran 1 s late
    first = inst.sla_event_id
    # Stopped and started again before the 60 s beat ran: the start replaces the breach id.
    body = _restart(client, inst.pk)
    inst.refresh_from_db()
    assert inst.sla_event_id != first and inst.sla_settled_event_id == first
    [transfer] = Transfer.objects.filter(key=f"sla:{first}")  # granted by the start itself
    assert transfer.amount == hours(1, cards=2)
    assert body["sla"]["compensation"] is None  # the body shows the new window
    assert instance_advance(inst.pk) == "running"
    assert sla_settle_due() == 0  # the new window was on time; the old one is not granted again
    assert Transfer.objects.filter(key__startswith="sla:").count() == 1
    assert Account.objects.get(organization=owner.organization, kind="compensation").balance == hours(1, 2)


def test_a_start_refused_as_sold_out_leaves_the_late_window_to_the_beat_once(client):
    inst = _running(client, cards=8)
    Instance.objects.filter(pk=inst.pk).update(sla_deadline=inst.ready_at - SECOND)
    first = inst.sla_event_id
    client.post(f"{URL}{inst.pk}/stop/")
    assert instance_advance(inst.pk) == "stopped"
    other = client.post(URL, container_body("h100-sxm-80g", 8), format="json")
    assert other.status_code == 201  # took the only node
    assert client.post(f"{URL}{inst.pk}/start/").status_code == 409
    assert not Transfer.objects.filter(key=f"sla:{first}").exists()  # rolled back with the start
    assert sla_settle_due() == 1
    assert sla_settle_due() == 0
    assert [t.amount for t in Transfer.objects.filter(key=f"sla:{first}")] == [hours(1, 8)]


def test_a_restart_shows_the_new_window_late_while_still_on_its_way(client):
    inst = _running(client, cards=1)
    body = _restart(client, inst.pk)
    assert body["state"] == "provisioning" and body["ready_at"] is None  # the previous run's is not this one's
    assert Instance.objects.get(pk=inst.pk).ready_at is None
    assert client.get(f"{URL}{inst.pk}/").json()["sla"]["breached"] is False
    set_ago(inst.pk, sla_deadline=10 * 60 * SECOND)  # the new window's deadline passed 10 minutes ago
    assert client.get(f"{URL}{inst.pk}/").json()["sla"]["breached"] is True
    [row] = client.get(URL).json()["results"]  # the list's own row path agrees
    assert row["sla"]["breached"] is True
    # A row restarted before this fix still carries the earlier run's ready_at: in flight, it is ignored.
    set_ago(inst.pk, ready_at=24 * HOUR)
    assert client.get(f"{URL}{inst.pk}/").json()["sla"]["breached"] is True
    assert client.get(URL).json()["results"][0]["sla"]["breached"] is True
