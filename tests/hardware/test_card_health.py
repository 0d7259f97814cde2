"""Health with every heartbeat: the agent API takes the probe, hardware keeps each new degraded/failed signal once
(the evidence), raises the card's health, and leaves cards healthier than reported to operators alone."""
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from hardware.models import CardSignal, NodeCredential
from inventory.models import Card
from inventory.services import cards_set_health
from tenancy.models import AuditEvent
from tests.factories.hardware import agent_node

pytestmark = pytest.mark.django_db
CORPUS = Path(__file__).resolve().parent / "health_corpus"
HEARTBEAT = {"agent_version": "1.6.0", "hostname": "h", "runtime": "process"}
GPU = {"output": (CORPUS / "nvidia_gpu-healthy-h100.txt").read_text(), "exit_code": 0}


def beat(secret, probe):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client.post("/api/v1/agent/heartbeat/", {**HEARTBEAT, "health_probe": probe}, format="json")


def xid(sample):
    return {"nvidia_gpu": GPU, "kernel_xid": {"output": (CORPUS / sample).read_text(), "exit_code": 0}}


def test_xid_79_fails_its_card_once_with_the_evidence():
    node, secret = agent_node(hostname="gpu-xid.test", card_count=8)
    assert beat(secret, xid("kernel_xid-79-dmesg.txt")).status_code == 200
    card = Card.objects.get(node=node, index=2)  # bus 0000:3b:00 in the healthy query
    assert card.health == "failed"
    assert set(Card.objects.filter(node=node).exclude(index=2).values_list("health", flat=True)) == {"ok"}
    [signal] = CardSignal.objects.filter(node=node)
    assert (signal.card_id, signal.kind, signal.code, signal.klass) == (card.pk, "xid", 79, "failed")
    audit = AuditEvent.objects.get(action="card.health", target_id=str(card.pk))
    assert audit.details["to"] == "failed" and "fallen off the bus" in audit.details["reason"]
    # The same kernel log line in the next heartbeat is the same signal.
    assert beat(secret, xid("kernel_xid-79-dmesg.txt")).status_code == 200
    assert CardSignal.objects.filter(node=node).count() == 1


def test_operator_marks_healthy_and_only_a_new_signal_fails_it_again():
    node, secret = agent_node(hostname="gpu-again.test", card_count=8)
    beat(secret, xid("kernel_xid-79-dmesg.txt"))
    card = Card.objects.get(node=node, index=2)
    cards_set_health(card_ids=[card.pk], health="ok", reason="reseated and power-cycled")
    beat(secret, xid("kernel_xid-79-dmesg.txt"))  # the old line still in the ring buffer
    card.refresh_from_db()
    assert card.health == "ok"
    later = xid("kernel_xid-79-dmesg.txt")
    later["kernel_xid"]["output"] = later["kernel_xid"]["output"].replace("8712.", "9900.")
    beat(secret, later)
    card.refresh_from_db()
    assert card.health == "failed" and CardSignal.objects.filter(card=card).count() == 2


def test_degraded_never_lowers_a_failed_card_and_info_is_not_kept():
    node, secret = agent_node(hostname="gpu-deg.test", card_count=8)
    beat(secret, xid("kernel_xid-95-dmesg.txt"))
    beat(secret, xid("kernel_xid-48-dmesg.txt"))
    beat(secret, xid("kernel_xid-13-dmesg.txt"))
    card = Card.objects.get(node=node, index=2)
    assert card.health == "failed"
    assert sorted(CardSignal.objects.filter(node=node).values_list("code", flat=True)) == [48, 95]


def test_degraded_signal_degrades_a_healthy_card():
    node, secret = agent_node(hostname="gpu-nvl.test", card_count=8)
    beat(secret, {"nvlink": {"output": (CORPUS / "nvlink-down.txt").read_text(), "exit_code": 0}})
    assert Card.objects.get(node=node, index=3).health == "degraded"


def test_unparsed_output_is_reported_never_healthy_and_the_heartbeat_lands():
    node, secret = agent_node(hostname="gpu-garbled.test", card_count=8)
    r = beat(secret, {"nvidia_gpu": {"output": "Failed to initialize NVML: Driver/library version mismatch",
                                     "exit_code": 0}, "dcgm": {"output": "", "exit_code": 0}})
    assert r.status_code == 200, r.json()
    facts = NodeCredential.objects.get(node=node).facts
    assert {s["class"] for s in facts["health_signals"]} == {"unparsed"}
    assert len(facts["health_signals"]) == 2
    assert set(Card.objects.filter(node=node).values_list("health", flat=True)) == {"ok"}
    assert not CardSignal.objects.filter(node=node).exists()


@pytest.mark.parametrize("probe", [{"nvidia_gpu": {"output": "x"}}, {"nvidia_gpu": "text"},
                                   {f"s{i}": {"output": "", "exit_code": 0} for i in range(17)}])
def test_a_malformed_probe_is_a_400_naming_it(probe):
    _, secret = agent_node(hostname="gpu-bad.test", card_count=2)
    r = beat(secret, probe)
    assert r.status_code == 400 and "health_probe" in str(r.json())


def test_a_failed_and_a_degraded_signal_in_one_heartbeat_fail_the_card():
    node, secret = agent_node(hostname="gpu-both.test", card_count=8)
    probe = xid("kernel_xid-79-dmesg.txt")
    nvlink = (CORPUS / "nvlink-down.txt").read_text().replace("GPU 3:", "GPU 9:").replace("GPU 2:", "GPU 3:")
    probe["nvlink"] = {"output": nvlink.replace("GPU 9:", "GPU 2:"), "exit_code": 0}  # card 2's links down too
    assert beat(secret, probe).status_code == 200
    assert Card.objects.get(node=node, index=2).health == "failed"
    assert sorted(CardSignal.objects.filter(node=node).values_list("kind", flat=True)) == ["nvlink_down", "xid"]


def test_operators_read_the_evidence_in_the_admin(operator_client):
    node, secret = agent_node(hostname="gpu-admin-signal.test", card_count=8)
    beat(secret, xid("kernel_xid-79-dmesg.txt"))
    page = operator_client.get("/admin/hardware/cardsignal/").content.decode()
    assert "gpu-admin-signal.test" in page and "fallen off the bus" in page
