"""A card of a running instance reports degraded or failed with its node's heartbeat (services/health.py): the
users are warned (notice) or told at once (notice, email, webhook); a failed card is not charged from the signal's
second, exact to the µCNY, and is never placed again until an operator marks it healthy; a container moves to
healthy cards in one click. Steps run in this process on a simulated node with an agent credential (the live
agent test is tests/hardware/test_health_live.py)."""
from datetime import timedelta
from pathlib import Path

import pytest
from django.core import mail
from django.db.models import Sum
from rest_framework.test import APIClient

from billing.models import Meter, Transfer
from billing.products.statements import statement_build
from billing.rating import cumulative_charge, whole_seconds
from billing.selectors import instance_metered_total
from billing.tick import meter_tick
from billing.verify import ledger_verify
from billing.zone import billing_tz
from core.dbclock import db_now
from core.failpoints import armed
from hardware.models import AgentCommand, CardSignal
from inventory.catalog_seed import seed_catalog
from inventory.models import Card, CardAllocation
from inventory.services import cards_set_health
from provisioning.models import CardRetest, HealthIncident, Instance, NodeGroup, ReadinessReport
from provisioning.services.health_move import HEALTH_MOVED
from provisioning.services.health_sweep import health_incidents_sweep
from provisioning.services.retest import card_retest_run
from provisioning.services.steps import group_check, instance_check, instance_provision
from provisioning.tasks import instance_advance
from tests.factories.hardware import agent_node
from tests.factories.inventory import ZoneFactory
from tests.factories.provisioning import container_body
from webhooks.models import WebhookEndpoint, WebhookEvent

pytestmark = pytest.mark.django_db
URL = "/api/v1/instances/"
RATE, CARDS = 1_900_000, 8  # H100 list price, µCNY per card-hour
CORPUS = Path(__file__).resolve().parents[1] / "hardware" / "health_corpus"
GPU = {"output": (CORPUS / "nvidia_gpu-healthy-h100.txt").read_text(), "exit_code": 0}  # card 2 = bus 0000:3b:00


@pytest.fixture
def node(db):
    seed_catalog()
    zone = ZoneFactory(slug="zone-health", name="zone-health")
    return agent_node(driver="simulated", zone=zone, hostname="gpu-health-01.test")


def beat(secret, probe):
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    r = c.post("/api/v1/agent/heartbeat/", {"agent_version": "1.6.0", "hostname": "h", "runtime": "process",
                                            "health_probe": probe}, format="json")
    assert r.status_code == 200, r.json()


def xid(sample="kernel_xid-79-dmesg.txt"):
    return {"nvidia_gpu": GPU, "kernel_xid": {"output": (CORPUS / sample).read_text(), "exit_code": 0}}


def create(client, count=CARDS):
    return client.post(URL, container_body("h100-sxm-80g", count, zone="zone-health"), format="json")


def running(client) -> str:
    r = create(client)
    assert r.status_code == 201, r.json()
    assert instance_advance(r.json()["id"]) == "running"
    return r.json()["id"]


def billing_month(at) -> str:
    return at.astimezone(billing_tz()).strftime("%Y-%m")


def net_charged(iid) -> int:
    def total(code):
        return Transfer.objects.filter(instance_id=iid, code=code).aggregate(s=Sum("amount"))["s"] or 0
    return instance_metered_total(iid) - total("health_incident")  # a tick's transfers name no instance


def test_a_failed_card_is_told_at_once_and_not_charged_from_that_second(
        client, owner, node, django_capture_on_commit_callbacks):
    node, secret = node
    WebhookEndpoint.objects.create(organization=owner.organization, url="https://93.184.216.34/h",
                                   event_types=["instance.card_failed"])
    iid = running(client)
    opened = db_now() - timedelta(seconds=1000)
    Meter.objects.filter(instance_id=iid).update(opened_at=opened)
    meter_tick(now=db_now() + timedelta(seconds=300))  # a tick ran ahead of the heartbeat: 1300 s posted
    with django_capture_on_commit_callbacks(execute=True):
        beat(secret, xid())
    card = Card.objects.get(node=node, index=2)
    assert card.health == "failed"
    incident = HealthIncident.objects.get(instance_id=iid)
    assert (incident.card_id, incident.klass, incident.ended_at) == (card.pk, "failed", None)
    # The item's meter closed at the failure second; what the tick charged past it came back, once per incident.
    old, rest = Meter.objects.filter(instance_id=iid).order_by("pk")
    through = whole_seconds(opened, incident.failed_at)
    assert old.closed_at == incident.failed_at and old.posted_amount - old.credited_amount == \
        cumulative_charge(RATE, CARDS, through)
    assert incident.credited == old.credited_amount == cumulative_charge(RATE, CARDS, 1300) - \
        cumulative_charge(RATE, CARDS, through) > 0
    credit = Transfer.objects.get(code="health_incident", instance_id=iid)
    assert credit.key == f"health:{incident.pk}:{old.pk}" and credit.credit_account.kind == "compensation"
    assert "failed" in old.flags[0] and "card 2" in old.flags[0]
    # The other seven go on from that very second.
    assert (rest.cards, rest.opened_at, rest.closed_at) == (CARDS - 1, incident.failed_at, None)
    meter_tick(now=incident.failed_at + timedelta(seconds=600))
    assert net_charged(iid) == cumulative_charge(RATE, CARDS, through) + cumulative_charge(RATE, CARDS - 1, 600)
    assert ledger_verify() == []
    # The statement's usage lines say why the item has two meters (and what was not charged from when).
    month = billing_month(incident.failed_at)
    lines = {u["meter_id"]: u for u in statement_build(org=owner.organization, month=month).usage}
    assert lines[old.pk]["flags"] == old.flags and "not charged from then" in lines[old.pk]["flags"][0]
    assert lines[rest.pk]["cards"] == CARDS - 1
    statement = client.get(f"/billing/statements/{month}/").content.decode()
    assert "not charged from then" in statement

    # Told at once: notice (API, page with the move button), email, webhook.
    body = client.get(f"{URL}{iid}/").json()
    [notice] = body["notices"]
    assert (notice["code"], notice["card"], notice["billing"], notice["action"]) == ("card_failed", 2,
                                                                                      "not_charged", "move")
    page = client.get(f"/instances/{iid}/").content.decode()
    assert f'id="notice-card_failed-{node.hostname}-2"' in page and 'data-action="move"' in page
    assert 'id="health-incidents"' in page
    assert [m.to for m in mail.outbox] == [[owner.user.email]]
    assert "failed" in mail.outbox[0].subject and "fallen off the bus" in mail.outbox[0].body
    event = WebhookEvent.objects.get(type="instance.card_failed")
    assert event.payload["data"]["card"] == f"{node.hostname} card 2"

    # The same line again: nothing more (no second incident, credit, email or event).
    with django_capture_on_commit_callbacks(execute=True):
        beat(secret, xid())
    assert HealthIncident.objects.count() == 1 and len(mail.outbox) == 1
    assert Transfer.objects.filter(code="health_incident").count() == 1

    # Stopped: the incident ends, valued; the card is never placed again until an operator marks it healthy.
    assert client.post(f"{URL}{iid}/stop/").status_code == 202
    incident.refresh_from_db()
    assert incident.outcome == "stopping"
    assert incident.uncharged == cumulative_charge(RATE, 1, whole_seconds(incident.failed_at, incident.ended_at))
    instance_advance(iid)
    assert not CardAllocation.objects.live().filter(card__node=node).exists()
    refused = create(client, CARDS)  # seven healthy cards are free, the eighth is the failed one
    assert refused.status_code == 409 and refused.json()["error"]["details"]["missing"] == ["h100-sxm-80g: 1"]
    cards_set_health(card_ids=[card.pk], health="ok", reason="reseated and power-cycled")
    again = create(client, CARDS)
    assert again.status_code == 201, again.json()
    assert card.pk in CardAllocation.objects.live().filter(holder_id=again.json()["id"]).values_list("card_id",
                                                                                                     flat=True)


def test_a_degraded_card_warns_and_is_charged_and_flagged(client, node):
    node, secret = node
    iid = running(client)
    beat(secret, {"nvlink": {"output": (CORPUS / "nvlink-down.txt").read_text(), "exit_code": 0}})
    incident = HealthIncident.objects.get(instance_id=iid)
    assert (incident.klass, incident.failed_at) == ("degraded", None)
    [meter] = Meter.objects.filter(instance_id=iid)
    assert meter.closed_at is None and meter.cards == CARDS and "degraded" in meter.flags[0]
    [notice] = client.get(f"{URL}{iid}/").json()["notices"]
    assert (notice["code"], notice["card"], notice["billing"], notice["action"]) == ("card_degraded", 3,
                                                                                      "charged", None)
    assert Card.objects.get(node=node, index=3).health == "degraded"
    # Then it fails: the same incident, not charged from then.
    beat(secret, {"nvidia_gpu": GPU, "nvidia_remap": {"output": (CORPUS / "nvidia_remap-failure.txt").read_text()
                                                      .replace("3B", "5D"), "exit_code": 0}})
    incident.refresh_from_db()
    assert incident.klass == "failed" and incident.failed_at is not None
    assert Meter.objects.filter(instance_id=iid, closed_at__isnull=True).get().cards == CARDS - 1


def test_move_to_healthy_cards_keeps_the_instance_and_leaves_the_failed_card(client, node):
    node, secret = node
    iid = running(client)  # on `node`: the spare is added after, so no placement order can pick it
    spare, _ = agent_node(driver="simulated", zone=node.zone, hostname="gpu-health-02.test")
    assert client.post(f"{URL}{iid}/move/").status_code == 409  # nothing failed yet
    beat(secret, xid())
    # The one click: the notice's button posts the console's move action (no JavaScript needed).
    r = client.post(f"/instances/{iid}/move/")
    assert r.status_code == 302 and r["Location"] == f"/instances/{iid}/"
    instance = Instance.objects.get(pk=iid)
    assert (instance.state, instance.state_reason) == ("provisioning", HEALTH_MOVED)
    assert HealthIncident.objects.get(instance_id=iid).outcome == "provisioning"
    [group] = NodeGroup.objects.live().filter(instance_id=iid)
    assert group.node_id == spare.pk
    # The old container's release is queued on the failed card's node now, not at the next orphan sweep.
    assert AgentCommand.objects.filter(node=node, kind="release").count() == 1
    assert instance_advance(iid) == "running"
    assert client.post(f"{URL}{iid}/move/").status_code == 409  # its incident ended with the move


def test_a_move_back_onto_the_same_node_and_first_card_queues_the_old_containers_release_first(client, node):
    node, secret = node
    r = create(client, 4)
    iid = r.json()["id"]
    assert instance_advance(iid) == "running"
    [old] = NodeGroup.objects.live().filter(instance_id=iid)
    assert old.card_indices == [0, 1, 2, 3]
    other = create(client, 3).json()["id"]  # holds 4, 5, 6: after card 2 fails only 0, 1, 3 and 7 are free
    assert instance_advance(other) == "running"
    beat(secret, xid())  # card 2 (bus 0000:3b:00) fails
    assert client.post(f"{URL}{iid}/move/").status_code == 202
    [new] = NodeGroup.objects.live().filter(instance_id=iid)
    assert new.node_id == node.pk and new.card_indices == [0, 1, 3, 7]
    # The same container name (its first card, 0): the old one's release is queued, and before the new prepare.
    [release] = AgentCommand.objects.filter(node=node, kind="release")
    assert release.payload == {"cards": [0], "instance_id": iid, "name": f"cardmix-{iid}-0"}
    assert instance_advance(iid) == "running"


def test_a_listener_that_failed_is_made_good_by_the_sweep_exactly_and_once(
        client, owner, node, django_capture_on_commit_callbacks):
    node, secret = node
    iid = running(client)
    opened = db_now() - timedelta(seconds=1000)
    Meter.objects.filter(instance_id=iid).update(opened_at=opened)
    meter_tick(now=db_now() + timedelta(seconds=300))  # a tick ran ahead: 1300 s posted
    with armed({"health:listener"}):  # the listener raises once; hardware logs it and the heartbeat lands
        beat(secret, xid())
    card = Card.objects.get(node=node, index=2)
    signal = CardSignal.objects.get(card=card)
    assert card.health == "failed" and not HealthIncident.objects.exists()
    assert Meter.objects.filter(instance_id=iid).count() == 1 and not mail.outbox  # nothing done: still charged

    with django_capture_on_commit_callbacks(execute=True):
        assert health_incidents_sweep() == {"recorded": 1, "split": 0}
    incident = HealthIncident.objects.get(instance_id=iid)
    assert (incident.klass, incident.failed_at) == ("failed", signal.seen_at)  # from the signal's second, not now
    old, rest = Meter.objects.filter(instance_id=iid).order_by("pk")
    through = whole_seconds(opened, signal.seen_at)
    assert old.closed_at == signal.seen_at and rest.opened_at == signal.seen_at and rest.cards == CARDS - 1
    assert old.posted_amount - old.credited_amount == cumulative_charge(RATE, CARDS, through)
    assert incident.credited == cumulative_charge(RATE, CARDS, 1300) - cumulative_charge(RATE, CARDS, through) > 0
    assert Transfer.objects.get(code="health_incident").key == f"health:{incident.pk}:{old.pk}"
    assert [m.to for m in mail.outbox] == [[owner.user.email]]  # told, late but once
    # Again (the next beat, or beside a listener that works): nothing more.
    with django_capture_on_commit_callbacks(execute=True):
        assert health_incidents_sweep() == {"recorded": 0, "split": 0}
        beat(secret, xid())
    assert HealthIncident.objects.count() == 1 and Transfer.objects.filter(code="health_incident").count() == 1
    assert len(mail.outbox) == 1 and Meter.objects.filter(instance_id=iid).count() == 2
    meter_tick(now=signal.seen_at + timedelta(seconds=600))
    assert net_charged(iid) == cumulative_charge(RATE, CARDS, through) + cumulative_charge(RATE, CARDS - 1, 600)
    assert ledger_verify() == []


def test_the_sweep_escalates_a_degraded_incident_and_does_a_missing_billing_split(client, node):
    node, secret = node
    iid = running(client)
    opened = db_now() - timedelta(seconds=500)
    Meter.objects.filter(instance_id=iid).update(opened_at=opened)
    beat(secret, {"nvlink": {"output": (CORPUS / "nvlink-down.txt").read_text(), "exit_code": 0}})  # card 3
    with armed({"health:listener"}):  # then card 3 fails, and its listener raises
        beat(secret, {"nvidia_gpu": GPU, "nvidia_remap": {
            "output": (CORPUS / "nvidia_remap-failure.txt").read_text().replace("3B", "5D"), "exit_code": 0}})
    incident = HealthIncident.objects.get(instance_id=iid)
    assert (incident.klass, incident.failed_at) == ("degraded", None)
    assert health_incidents_sweep() == {"recorded": 1, "split": 0}
    incident.refresh_from_db()
    failed = CardSignal.objects.get(card_id=incident.card_id, klass="failed")
    assert (incident.klass, incident.failed_at) == ("failed", failed.seen_at)
    assert Meter.objects.get(instance_id=iid, closed_at__isnull=True).cards == CARDS - 1

    # A failed incident whose split never happened (written failed, its item still metered whole).
    other = running_on_spare(client, node)
    Meter.objects.filter(instance_id=other).update(opened_at=db_now() - timedelta(seconds=1000))
    meter_tick(now=db_now() + timedelta(seconds=200))
    card = Card.objects.filter(node__hostname="gpu-health-03.test").order_by("index").first()
    at = db_now() - timedelta(seconds=100)
    broken = HealthIncident.objects.create(instance_id=other, card=card, item_index=0, klass="failed", detail="Xid 79",
                                           started_at=at, failed_at=at, rate=RATE)
    [whole] = Meter.objects.filter(instance_id=other)
    assert health_incidents_sweep() == {"recorded": 0, "split": 1}
    whole.refresh_from_db()
    broken.refresh_from_db()
    through = whole_seconds(whole.opened_at, at)
    assert whole.closed_at == at and whole.posted_amount - whole.credited_amount == cumulative_charge(RATE, CARDS,
                                                                                                      through)
    assert broken.credited == whole.credited_amount > 0
    assert Meter.objects.get(instance_id=other, closed_at__isnull=True).opened_at == at
    assert health_incidents_sweep() == {"recorded": 0, "split": 0}  # done once
    assert ledger_verify() == []


def running_on_spare(client, node) -> str:
    """An 8-card instance on a fresh node of the zone (the first is busy)."""
    agent_node(driver="simulated", zone=node.zone, hostname="gpu-health-03.test")
    return running(client)


def test_a_card_failing_during_readiness_fails_the_check_and_goes_through_the_second_pass(client, node):
    node, secret = node
    r = create(client)
    assert r.status_code == 201, r.json()
    iid = r.json()["id"]
    instance_provision(iid)
    assert Instance.objects.get(pk=iid).state == "checking"
    spare, _ = agent_node(driver="simulated", zone=node.zone, hostname="gpu-health-04.test")
    beat(secret, xid())  # card 2 falls off the bus while the instance is checking: nothing to credit, no incident
    assert not HealthIncident.objects.exists()
    instance_check(iid)
    # Readiness failed on the card's word (no second attempt), re-placed like any readiness failure.
    instance = Instance.objects.get(pk=iid)
    assert instance.state == "provisioning" and instance.state_reason == f"re-placed: {node.hostname} failed readiness"
    [report] = ReadinessReport.objects.filter(instance_id=iid, node=node)
    assert (report.scope, report.passed, report.cards) == ("health", False, [2])
    assert "card 2 reported failed: Xid 79" in report.errors[0]
    listed = client.get(f"{URL}{iid}/readiness/").json()["results"]
    assert [(x["passed"], x["cards"]) for x in listed] == [(False, [2])]
    # The second pass holds the node's other cards; the failed one stays failed whatever the pass says.
    retest = CardRetest.objects.get(node=node)
    assert (retest.cause, retest.first_report_id) == ("readiness_failed", report.pk)
    healths = dict(Card.objects.filter(node=node).values_list("index", "health"))
    assert healths[2] == "failed" and {healths[i] for i in healths if i != 2} == {"degraded"}
    assert instance_advance(iid) == "running"
    assert NodeGroup.objects.live().get(instance_id=iid).node_id == spare.pk
    assert card_retest_run(retest_id=retest.pk) == "passed"
    healths = dict(Card.objects.filter(node=node).values_list("index", "health"))
    assert healths[2] == "failed" and {healths[i] for i in healths if i != 2} == {"ok"}
    assert not HealthIncident.objects.exists() and not Transfer.objects.filter(code="health_incident").exists()


def test_a_card_failing_after_its_check_passed_is_not_handed_over(client, node):
    node, secret = node
    iid = create(client).json()["id"]
    instance_provision(iid)
    instance = Instance.objects.get(pk=iid)
    [group] = NodeGroup.objects.live().filter(instance_id=iid)
    assert group_check(instance, group) is True  # passed; the instance has not gone running yet
    spare, _ = agent_node(driver="simulated", zone=node.zone, hostname="gpu-health-05.test")
    beat(secret, xid())
    instance_check(iid)  # under the lock that would open its meters, it sees the failed card
    instance.refresh_from_db()
    assert instance.state == "provisioning" and not Meter.objects.filter(instance_id=iid).exists()
    assert ReadinessReport.objects.filter(instance_id=iid, scope="health", passed=False, cards=[2]).exists()
    assert instance_advance(iid) == "running"
    assert NodeGroup.objects.live().get(instance_id=iid).node_id == spare.pk


def test_a_card_failing_while_its_instance_stops_credits_nothing_beyond_the_stop(client, node):
    node, secret = node
    iid = running(client)
    assert client.post(f"{URL}{iid}/stop/").status_code == 202
    [meter] = Meter.objects.filter(instance_id=iid)
    assert meter.closed_at is not None  # closed as it left running
    beat(secret, xid())
    assert not HealthIncident.objects.exists() and not Transfer.objects.filter(code="health_incident").exists()
    assert instance_advance(iid) == "stopped"
    assert Card.objects.get(node=node, index=2).health == "failed"  # never placed again until an operator says so
    meter.refresh_from_db()
    assert meter.credited_amount == 0 and Meter.objects.filter(instance_id=iid).count() == 1
    assert ledger_verify() == []


def test_the_sweep_reads_from_the_unhealthy_cards_not_from_every_running_instance(db):
    """The scale goals (SPEC §13): a periodic job bounded by its work. With every card healthy the sweep is
    two short statements, whatever the number of running instances (it read them all into an IN list: 1.7 s at
    100k)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.factories.provisioning import InstanceFactory

    InstanceFactory.create_batch(40, state="running", ready_at=db_now())
    with CaptureQueriesContext(connection) as statements:
        assert health_incidents_sweep() == {"recorded": 0, "split": 0}
    sql = [q["sql"] for q in statements.captured_queries]
    assert len(sql) <= 2 and max(len(s) for s in sql) < 1500, sql
