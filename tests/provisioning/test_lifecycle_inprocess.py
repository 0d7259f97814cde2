"""Create → running → stop → start → terminate, with the task body run in this process.

(The same flow through a real worker process is in test_worker_lifecycle.py; these tests exercise
every step's database effects quickly and deterministically.)
"""
import pytest

from billing.models import Meter
from inventory.models import CardAllocation
from provisioning.models import Instance, ReadinessReport
from provisioning.services.fleet import fault_force
from provisioning.tasks import instance_advance
from tests.factories.provisioning import container_body, make_fleet

pytestmark = pytest.mark.django_db
URL = "/api/v1/instances/"


def _create(client, body):
    return client.post(URL, body, format="json")


def test_create_runs_readiness_and_opens_one_meter(client):
    make_fleet(h100=1)
    r = _create(client, container_body("h100-sxm-80g", 4))
    assert r.status_code == 201, r.json()
    body = r.json()
    assert body["state"] == "provisioning"
    assert body["price_per_hour"] == "7.600000"
    assert len(body["nodes"]) == 1 and len(body["nodes"][0]["cards"]) == 4
    assert body["ssh"][0]["command"] == f"ssh -p 30000 root@{body['ssh'][0]['host']}"  # base + first card
    assert instance_advance(body["id"]) == "running"
    inst = Instance.objects.get(pk=body["id"])
    assert inst.ready_at is not None
    report = ReadinessReport.objects.get(instance=inst)
    assert report.passed and report.tool == "nccl-tests" and report.busbw_largest_gbps >= 235
    assert report.topology
    meters = list(Meter.objects.filter(instance_id=inst.pk, closed_at__isnull=True))
    assert [(m.accelerator, m.cards, m.rate) for m in meters] == [("h100-sxm-80g", 4, 1_900_000)]
    r = client.get(f"{URL}{inst.pk}/readiness/")
    assert r.status_code == 200 and r.json()["results"][0]["passed"] is True


def test_readiness_retried_once_then_failed_and_cards_released(client):
    node = make_fleet(h100=1)[0]
    fault_force(node=node, operation="readiness", faults=["low_bandwidth"], times=2)
    r = _create(client, container_body("h100-sxm-80g", 2))
    assert r.status_code == 201
    assert instance_advance(r.json()["id"]) == "failed"
    reports = ReadinessReport.objects.filter(instance_id=r.json()["id"]).order_by("attempt")
    assert [(x.attempt, x.passed) for x in reports] == [(1, False), (2, False)]
    assert any(e.startswith("below_floor") for e in reports[0].errors)
    assert not CardAllocation.objects.filter(holder_id=r.json()["id"], released_at__isnull=True).exists()


def test_readiness_retry_passes_on_second_attempt(client):
    node = make_fleet(h100=1)[0]
    fault_force(node=node, operation="readiness", faults=["nccl_error"], times=1)
    r = _create(client, container_body("h100-sxm-80g", 8))
    assert instance_advance(r.json()["id"]) == "running"
    assert list(ReadinessReport.objects.filter(instance_id=r.json()["id"]).order_by("attempt")
                .values_list("attempt", "passed")) == [(1, False), (2, True)]


def test_one_card_group_gets_a_health_check(client):
    make_fleet(ascend=1)
    r = _create(client, container_body("ascend-910b", 1))
    assert instance_advance(r.json()["id"]) == "running"
    report = ReadinessReport.objects.get(instance_id=r.json()["id"])
    assert (report.scope, report.tool, report.passed) == ("health", "npu-smi", True)


def test_stop_start_terminate(client):
    make_fleet(h100=1)
    iid = _create(client, container_body("h100-sxm-80g", 2)).json()["id"]
    instance_advance(iid)
    r = client.post(f"{URL}{iid}/stop/")
    assert r.status_code == 202 and r.json()["state"] == "stopping"
    assert Meter.objects.filter(instance_id=iid, closed_at__isnull=False).count() == 1
    assert instance_advance(iid) == "stopped"
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()
    # What the stop kept, for API callers too (before: "stopped", read as "its data disk is kept").
    said = "stopped: nothing kept, its container is deleted with its disk (no volume is attached)"
    assert client.get(f"{URL}{iid}/").json()["state_reason"] == said
    assert client.get(f"{URL}{iid}/events/").json()["results"][5]["reason"] == said
    assert client.post(f"{URL}{iid}/stop/").json()["error"]["code"] == "invalid_state"
    r = client.post(f"{URL}{iid}/start/")
    assert r.status_code == 202 and r.json()["state"] == "provisioning", r.json()
    assert instance_advance(iid) == "running"
    assert Meter.objects.filter(instance_id=iid, closed_at__isnull=True).count() == 1
    r = client.delete(f"{URL}{iid}/")
    assert r.status_code == 202 and r.json()["state"] == "terminating"
    assert instance_advance(iid) == "terminated"
    assert client.delete(f"{URL}{iid}/").status_code == 202
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()
    events = client.get(f"{URL}{iid}/events/").json()["results"]
    assert [e["to"] for e in events] == ["pending", "provisioning", "checking", "running", "stopping", "stopped",
                                         "starting", "provisioning", "checking", "running", "terminating",
                                         "terminated"]


def test_crash_before_meter_resumes_without_double_meters(client):
    from core.failpoints import FailpointCrash, armed

    make_fleet(h100=1)
    iid = _create(client, container_body("h100-sxm-80g", 2)).json()["id"]
    with armed({"provision:before_meter"}), pytest.raises(FailpointCrash):
        instance_advance(iid)
    inst = Instance.objects.get(pk=iid)
    assert inst.state == "checking" and not Meter.objects.filter(instance_id=iid).exists()
    assert instance_advance(iid) == "running"  # resumes: the passed group is not re-tested
    assert ReadinessReport.objects.filter(instance_id=iid).count() == 1
    assert Meter.objects.filter(instance_id=iid, closed_at__isnull=True).count() == 1


def test_boot_failure_retried_once_then_failed(client):
    node = make_fleet(h100=1)[0]
    fault_force(node=node, operation="prepare", faults=["boot_failure"], times=2)
    iid = _create(client, container_body("h100-sxm-80g", 2)).json()["id"]
    assert instance_advance(iid) == "failed"
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()
    assert "provisioning failed" in Instance.objects.get(pk=iid).state_reason


def test_multi_node_bare_metal_runs_the_inter_node_test(client):
    make_fleet(h100=2)
    r = _create(client, {**container_body("h100-sxm-80g", 16), "kind": "bare_metal"})
    assert r.status_code == 201, r.json()
    assert r.json()["ssh"][0]["user"] == "root" and len(r.json()["ssh"]) == 2
    assert instance_advance(r.json()["id"]) == "running"
    scopes = sorted(ReadinessReport.objects.filter(instance_id=r.json()["id"]).values_list("scope", flat=True))
    assert scopes == ["inter_node", "intra_node", "intra_node"]
    client.delete(f"{URL}{r.json()['id']}/")
    assert instance_advance(r.json()["id"]) == "terminated"
    # Whole nodes leave the tenant for a wipe before anyone else can be placed there.
    from inventory.models import Node

    assert set(Node.objects.values_list("state", flat=True)) == {"cleaning"}
    assert not CardAllocation.objects.filter(released_at__isnull=True).exists()


def test_autostop_hook_stops_on_demand_instances(client, owner):
    from billing.hooks import autostop_hook

    make_fleet(h100=1)
    iid = _create(client, container_body("h100-sxm-80g", 1)).json()["id"]
    instance_advance(iid)
    from core.dbclock import db_now

    at = db_now()
    Meter.objects.filter(instance_id=iid).update(billable_until_seconds=0)  # billing caps it before it asks
    autostop_hook()(org_id=owner.organization_id, at=at, reason="funds_exhausted")
    inst = Instance.objects.get(pk=iid)
    assert inst.state == "stopping" and "funds_exhausted" in inst.state_reason
    assert Meter.objects.get(instance_id=iid).closed_at == at  # billed to the exhaustion second
    assert instance_advance(iid) == "stopped"


def test_waitlisted_instance_is_woken_when_capacity_frees(client):
    from provisioning.services.waitlist import waitlist_wake

    make_fleet(h100=1)
    first = _create(client, container_body("h100-sxm-80g", 8)).json()["id"]
    waiting = _create(client, container_body("h100-sxm-80g", 4, waitlist=True)).json()
    assert waiting["state"] == "waitlisted" and waiting["sla"]["deadline"] is None
    assert waitlist_wake() == 0
    client.delete(f"{URL}{first}/")
    instance_advance(first)
    assert waitlist_wake() == 1
    inst = Instance.objects.get(pk=waiting["id"])
    assert inst.state == "provisioning" and inst.sla_deadline is not None
    assert instance_advance(inst.pk) == "running"


def test_start_when_sold_out_is_409_and_stays_stopped(client, owner):
    make_fleet(h100=1)
    iid = _create(client, container_body("h100-sxm-80g", 8)).json()["id"]
    instance_advance(iid)
    client.post(f"{URL}{iid}/stop/")
    instance_advance(iid)
    other = _create(client, container_body("h100-sxm-80g", 1)).json()["id"]  # takes a card meanwhile
    r = client.post(f"{URL}{iid}/start/")
    assert r.status_code == 409 and r.json()["error"]["code"] == "insufficient_capacity"
    assert Instance.objects.get(pk=iid).state == "stopped"
    Instance.objects.filter(pk=iid).update(waitlist=True)
    r = client.post(f"{URL}{iid}/start/")
    assert r.status_code == 202 and r.json()["state"] == "waitlisted"
    assert other


def test_rate_is_locked_at_create_and_relocked_at_start(client):
    from datetime import timedelta

    from core.dbclock import db_now
    from inventory.models import Accelerator, Price

    make_fleet(h100=1)
    iid = _create(client, container_body("h100-sxm-80g", 2)).json()["id"]
    instance_advance(iid)
    acc = Accelerator.objects.get(slug="h100-sxm-80g")
    Price.objects.create(accelerator=acc, on_demand_per_card_hour=3_000_000,
                         effective_from=db_now() - timedelta(seconds=1))
    assert Meter.objects.get(instance_id=iid).rate == 1_900_000  # a later price never changes it
    assert client.get(f"{URL}{iid}/").json()["price_per_hour"] == "3.800000"
    client.post(f"{URL}{iid}/stop/")
    instance_advance(iid)
    assert client.post(f"{URL}{iid}/start/").json()["price_per_hour"] == "6.000000"
    instance_advance(iid)
    assert Meter.objects.get(instance_id=iid, closed_at__isnull=True).rate == 3_000_000


def test_monthly_instance_is_charged_a_package_not_metered(client):
    from billing.products.packages import package_active

    make_fleet(h100=1)
    r = _create(client, container_body("h100-sxm-80g", 1, billing="monthly", package_renewal="stop"))
    assert r.status_code == 201, r.json()
    assert r.json()["price_per_hour"] == "1.235000"  # the operator's monthly rate for H100
    assert instance_advance(r.json()["id"]) == "running"
    assert package_active(r.json()["id"])
    assert not Meter.objects.filter(instance_id=r.json()["id"]).exists()


def test_a_policy_instance_restarts_on_another_allowed_mix_when_its_last_one_is_sold_out(client):
    from inventory.models import Card
    from tests.factories.inventory import CardAllocationFactory

    make_fleet(h100=1, h800=1)
    body = {"name": "p", "kind": "container", "images": {"nvidia": "pytorch-2.3-cuda12.3"},
            "policy": {"total_cards": 4, "compatible_vendors": ["nvidia"], "min_domestic_share": 0}}
    r = _create(client, body)
    assert r.status_code == 201, r.json()
    iid = r.json()["id"]
    assert instance_advance(iid) == "running"
    first = Instance.objects.get(pk=iid).items[0]["accelerator"]
    client.post(f"{URL}{iid}/stop/")
    assert instance_advance(iid) == "stopped"
    # Free cards of the same mix: the restart keeps it.
    assert client.post(f"{URL}{iid}/start/").status_code == 202
    assert instance_advance(iid) == "running" and Instance.objects.get(pk=iid).items[0]["accelerator"] == first
    client.post(f"{URL}{iid}/stop/")
    instance_advance(iid)
    # Now that accelerator is sold out: the policy picks the other allowed one instead of refusing.
    for card in Card.objects.filter(node__accelerator__slug=first):
        CardAllocationFactory(card=card)
    started = client.post(f"{URL}{iid}/start/")
    assert started.status_code == 202, started.json()
    other = started.json()["items"][0]["accelerator"]
    assert other != first and started.json()["items"][0]["count"] == 4
    assert instance_advance(iid) == "running"
    meter = Meter.objects.get(instance_id=iid, closed_at__isnull=True)
    assert meter.accelerator == other


def test_a_waitlisted_policy_restart_wakes_on_any_allowed_mix(client):
    from inventory.models import Card, CardAllocation
    from provisioning.services.waitlist import waitlist_wake
    from tests.factories.inventory import CardAllocationFactory

    make_fleet(h100=1, h800=1)
    body = {"name": "p", "kind": "container", "images": {"nvidia": "pytorch-2.3-cuda12.3"}, "waitlist": True,
            "policy": {"total_cards": 8, "compatible_vendors": ["nvidia"], "min_domestic_share": 0}}
    iid = _create(client, body).json()["id"]
    assert instance_advance(iid) == "running"
    first = Instance.objects.get(pk=iid).items[0]["accelerator"]
    client.post(f"{URL}{iid}/stop/")
    instance_advance(iid)
    blockers = [CardAllocationFactory(card=c) for c in Card.objects.all()]  # everything sold out
    assert client.post(f"{URL}{iid}/start/").json()["state"] == "waitlisted"
    # Only the other accelerator frees up: the wake places the policy there.
    other_cards = [b.pk for b in blockers if b.card.node.accelerator.slug != first]
    CardAllocation.objects.filter(pk__in=other_cards).delete()
    assert waitlist_wake() == 1
    inst = Instance.objects.get(pk=iid)
    assert inst.state == "provisioning" and inst.items[0]["accelerator"] != first
