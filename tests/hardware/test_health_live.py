"""Health while running (SPEC §10), end to end as its users see it: the built agent as a process against the
live server, a real Celery worker running the steps, and a stand-in nvidia-smi (and dmesg) whose card 2 falls
off the bus mid-run (Xid 79). Within one heartbeat the user sees the failure on the instance page and by
email, billing stops for that card from that second (ledger exact), and the card is never placed again until
an operator marks it healthy in the admin (audited)."""
import json
import time

import pytest
from django.core import mail
from django.db.models import Sum

from billing.models import Meter, Transfer
from billing.rating import cumulative_charge, whole_seconds
from billing.selectors import instance_metered_total
from billing.tick import meter_tick
from billing.verify import ledger_verify
from hardware.models import CardSignal, NodeCredential
from inventory.models import Card, CardAllocation
from provisioning.models import HealthIncident
from tenancy.models import AuditEvent
from tests.factories.hardware import agent_node
from tests.factories.inventory import ZoneFactory
from tests.factories.provisioning import container_body, funded, wait_for_state

from .conftest import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.timeout(300),
              pytest.mark.django_db(transaction=True)]
URL = "/api/v1/instances/"
HEARTBEAT_S = 0.3  # the agent's pause between heartbeats in these tests (conftest.AgentProcess)
WORKER_ENV = {"AGENT_COMMAND_POLL_SECONDS": "0.05", "AGENT_COMMAND_TIMEOUT_SECONDS": "60",
              "SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0"}


def net_charged(iid) -> int:
    def total(code):
        return Transfer.objects.filter(instance_id=iid, code=code).aggregate(s=Sum("amount"))["s"] or 0
    return instance_metered_total(iid) - total("health_incident")  # a tick's transfers name no instance


def test_xid_79_mid_run_is_told_within_a_heartbeat_and_not_charged_from_then(
        live_server, start_agent, start_worker, member_factory, session_client_for, operator_client, tmp_path):
    faults = tmp_path / "gpu-faults.json"
    zone = ZoneFactory(slug="zone-health-live", name="zone-health-live")
    node, token = agent_node(hostname="gpu-health-live.test", zone=zone)
    agent = start_agent(live_server.url, token, extra_env={"CARDMIX_FAKE_GPU_FAULTS": str(faults)})
    # The platform learns the cards' bus ids from the healthy heartbeats (a card off the bus is missing later).
    wait_for(lambda: len((NodeCredential.objects.get(node=node).facts or {}).get("card_buses") or {}) == 8,
             timeout=30, what=f"healthy heartbeats\n{agent.log_tail()}")
    worker = start_worker(extra_env=WORKER_ENV)
    owner = funded(member_factory(role="owner"))
    client = session_client_for(owner)
    r = client.post(URL, container_body("h100-sxm-80g", 8, zone="zone-health-live"), format="json")
    assert r.status_code == 201, r.json()
    iid = r.json()["id"]
    wait_for_state(iid, "running", timeout=120, worker=worker)
    meter = Meter.objects.get(instance_id=iid, closed_at__isnull=True)
    rate = meter.rate
    time.sleep(1.5)
    meter_tick()
    assert Meter.objects.get(pk=meter.pk).posted_amount > 0  # billed while healthy
    assert HealthIncident.objects.count() == 0 and mail.outbox == []

    faults.write_text(json.dumps({"fallen": [2]}))  # card 2 falls off the bus
    beats = set()

    def failed():
        beats.add(NodeCredential.objects.get(node=node).last_heartbeat_at)
        return HealthIncident.objects.filter(instance_id=iid, failed_at__isnull=False).first()
    before = NodeCredential.objects.get(node=node).last_heartbeat_at
    incident = wait_for(failed, timeout=60, interval=0.02, what=f"the incident\n{agent.log_tail()}")
    # Within one heartbeat: the one in flight when the card fell may have run its tools before; the next one
    # carries it, and the incident, notice and email are written while it is answered.
    landed = sorted(b for b in beats | {incident.failed_at} if b > before)
    assert len(landed) <= 2 and incident.failed_at == landed[-1], (before, landed, incident.failed_at)
    [notice] = client.get(f"{URL}{iid}/").json()["notices"]
    assert (notice["code"], notice["card"], notice["billing"], notice["action"]) == ("card_failed", 2,
                                                                                      "not_charged", "move")
    assert "fallen off the bus" in notice["detail"]
    page = client.get(f"/instances/{iid}/").content.decode()
    assert f'id="notice-card_failed-{node.hostname}-2"' in page and "fallen off the bus" in page
    email = wait_for(lambda: mail.outbox, timeout=10, what="the email")
    assert [m.to for m in email] == [[owner.user.email]] and "fallen off the bus" in email[0].body
    card = Card.objects.get(node=node, index=2)
    assert card.health == "failed"
    assert CardSignal.objects.get(card=card, kind="xid").code == 79  # its NVLinks read down too (degraded)

    # Billing: the 8-card meter closed at the failure second, 7 cards go on from that very second.
    old = Meter.objects.get(pk=meter.pk)
    rest = Meter.objects.get(instance_id=iid, closed_at__isnull=True)
    through = whole_seconds(old.opened_at, incident.failed_at)
    assert old.closed_at == incident.failed_at == rest.opened_at and rest.cards == 7
    assert old.posted_amount - old.credited_amount == cumulative_charge(rate, 8, through)
    time.sleep(1.5)
    meter_tick()
    rest.refresh_from_db()
    assert rest.posted_through_seconds > 0
    assert net_charged(iid) == cumulative_charge(rate, 8, through) + cumulative_charge(
        rate, 7, rest.posted_through_seconds)
    assert ledger_verify() == []
    # Heartbeats keep repeating the same Xid line: nothing more happens.
    time.sleep(3 * HEARTBEAT_S)
    assert HealthIncident.objects.count() == 1 and len(mail.outbox) == 1

    # Stopped: the incident ends; the failed card is not placed again, however the cards are asked for.
    assert client.post(f"{URL}{iid}/stop/").status_code == 202
    wait_for_state(iid, "stopped", timeout=120, worker=worker)
    incident.refresh_from_db()
    assert incident.ended_at is not None and incident.uncharged == cumulative_charge(
        rate, 1, whole_seconds(incident.failed_at, incident.ended_at))
    refused = client.post(URL, container_body("h100-sxm-80g", 8, zone="zone-health-live"), format="json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "insufficient_capacity"

    # The operator power-cycles it (the fault ends) and marks it healthy in the admin, with a reason: audited.
    faults.write_text(json.dumps({}))
    done = operator_client.post("/admin/inventory/card/", {"action": "action_health_ok", "apply": "1",
                                                           "_selected_action": [str(card.pk)],
                                                           "reason": "reseated, power-cycled"})
    assert done.status_code == 302
    assert Card.objects.get(pk=card.pk).health == "ok"
    assert AuditEvent.objects.filter(action="card.health", actor=operator_client.user,
                                     target_id=str(card.pk)).exists()
    time.sleep(3 * HEARTBEAT_S)  # the old Xid line is gone from the stand-in's log; nothing fails it again
    assert Card.objects.get(pk=card.pk).health == "ok"
    placed = client.post(URL, container_body("h100-sxm-80g", 8, zone="zone-health-live"), format="json")
    assert placed.status_code == 201, placed.json()
    assert CardAllocation.objects.live().filter(holder_id=placed.json()["id"], card=card).exists()
