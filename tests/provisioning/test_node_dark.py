"""A running instance whose node stops heartbeating (services/dark.py): told in the API, the console and by email;
not charged from the node's last heartbeat (+ grace), what ticks charged after it credited back exactly; charged
again from the resume; failed or moved after NODE_DARK_TIMEOUT_SECONDS. Steps run in this process on a simulated
node that has an agent credential (the live agent test is tests/hardware/test_node_dark_live.py)."""
from datetime import timedelta

import pytest
from django.core import mail
from django.db.models import Sum
from rest_framework.test import APIClient

from billing.models import Meter, Transfer
from billing.rating import cumulative_charge, whole_seconds
from billing.selectors import instance_metered_total
from billing.tick import meter_tick
from billing.verify import ledger_verify
from core.dbclock import db_now
from core.failpoints import FailpointCrash, armed
from hardware.models import NodeCredential
from hardware.services import heartbeats_check
from inventory.catalog_seed import seed_catalog
from inventory.models import CardAllocation
from provisioning.models import DarkEpisode, Instance, InstanceEvent, NodeGroup
from provisioning.services.dark import DARK_FAILED, DARK_MOVED, instances_dark_sweep
from provisioning.services.sla import sla_settle
from provisioning.tasks import instance_advance
from tests.factories.hardware import agent_node
from tests.factories.inventory import NodeFactory, ZoneFactory
from tests.factories.provisioning import container_body

pytestmark = pytest.mark.django_db
URL = "/api/v1/instances/"
RATE, CARDS = 1_900_000, 8  # H100 list price, µCNY per card-hour
HEARTBEAT = {"agent_version": "1.3.1", "hostname": "h", "runtime": "process"}


@pytest.fixture
def zone():
    seed_catalog()
    return ZoneFactory(slug="zone-dark", name="zone-dark")


@pytest.fixture
def dark_node(zone):
    """An H100 node of the simulated driver with an agent credential: (node, token secret)."""
    return agent_node(driver="simulated", zone=zone, hostname="gpu-dark-01.test")


def beat(secret):
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert c.post("/api/v1/agent/heartbeat/", HEARTBEAT, format="json").status_code == 200


def running(client) -> str:
    r = client.post(URL, container_body("h100-sxm-80g", CARDS, zone="zone-dark"), format="json")
    assert r.status_code == 201, r.json()
    assert instance_advance(r.json()["id"]) == "running"
    return r.json()["id"]


def go_dark(node, iid, *, ran: int = 1000, alive: int = 600):
    """The meter opened `ran` s ago, the agent's last heartbeat was `alive` s after that, its deadline passed;
    a tick posts the whole `ran` s first (the platform has not noticed yet). → the meter's opened_at."""
    now = db_now()
    opened = now - timedelta(seconds=ran)
    Meter.objects.filter(instance_id=iid).update(opened_at=opened)
    NodeCredential.objects.filter(node=node).update(last_heartbeat_at=opened + timedelta(seconds=alive),
                                                    heartbeat_deadline=now - timedelta(seconds=1))
    stats = meter_tick(now=now)
    assert stats["charged"] == cumulative_charge(RATE, CARDS, ran)  # charged past the last heartbeat
    assert heartbeats_check() == [node.hostname]
    return opened


def net_charged(iid) -> int:
    def total(code):
        return Transfer.objects.filter(instance_id=iid, code=code).aggregate(s=Sum("amount"))["s"] or 0
    return instance_metered_total(iid) - total("node_dark")  # a tick's transfers name no instance


def test_dark_node_tells_the_user_and_charges_only_the_seconds_seen_alive(client, owner, dark_node,
                                                                          django_capture_on_commit_callbacks):
    node, _ = dark_node
    iid = running(client)
    go_dark(node, iid)
    # Told at once: the notice is read from the node's state, before any sweep ran.
    body = client.get(f"{URL}{iid}/").json()
    assert [n["code"] for n in body["notices"]] == ["node_unreachable"]
    notice = body["notices"][0]
    assert notice["node"] == node.hostname and notice["billing"] == "paused" and notice["action"] == "fail"
    assert [r["notices"] for r in client.get(URL).json()["results"]] == [body["notices"]]
    assert 'id="notice-node_unreachable"' in client.get(f"/instances/{iid}/").content.decode()
    assert "Unreachable since" in client.get("/instances/").content.decode()
    assert "Unreachable since" in client.get("/dashboard/").content.decode()

    with django_capture_on_commit_callbacks(execute=True):
        assert instances_dark_sweep()["paused"] == 1
    episode = DarkEpisode.objects.get(instance_id=iid)
    meter = Meter.objects.get(instance_id=iid)
    assert whole_seconds(meter.opened_at, episode.paused_at) == 600 and meter.closed_at == episode.paused_at
    owed = cumulative_charge(RATE, CARDS, 600)  # 2.533333 CNY
    assert owed == 2_533_333
    assert episode.credited == cumulative_charge(RATE, CARDS, 1000) - owed == meter.credited_amount
    assert net_charged(iid) == owed
    assert client.get(f"{URL}{iid}/").json()["cost_so_far"] == "2.533333"
    credit = Transfer.objects.get(code="node_dark", instance_id=iid)
    assert credit.key == f"node_dark:{episode.pk}:{meter.pk}" and credit.credit_account.kind == "compensation"
    assert ledger_verify() == []
    assert [m.to for m in mail.outbox] == [[owner.user.email]]
    assert "unreachable" in mail.outbox[0].subject and "not charged" in mail.outbox[0].body

    # Ticks and sweeps while it stays dark charge nothing, credit nothing more and email no one again.
    with django_capture_on_commit_callbacks(execute=True):
        meter_tick(now=db_now() + timedelta(seconds=300))
        assert not any(instances_dark_sweep().values())
    assert net_charged(iid) == owed and len(mail.outbox) == 1
    assert Instance.objects.get(pk=iid).state == "running"


def test_the_grace_is_charged_and_nothing_after_it(client, dark_node, settings):
    settings.NODE_DARK_GRACE_SECONDS = 120
    node, _ = dark_node
    iid = running(client)
    go_dark(node, iid)
    instances_dark_sweep()
    assert net_charged(iid) == cumulative_charge(RATE, CARDS, 600 + 120)


def test_a_crash_while_pausing_leaves_nothing_and_the_retry_is_exact(client, dark_node):
    node, _ = dark_node
    iid = running(client)
    go_dark(node, iid)
    with armed({"billing.meters_pause:before_close"}), pytest.raises(FailpointCrash):
        instances_dark_sweep()
    assert not DarkEpisode.objects.exists() and not Transfer.objects.filter(code="node_dark").exists()
    assert Meter.objects.get(instance_id=iid).closed_at is None
    instances_dark_sweep()
    instances_dark_sweep()
    assert net_charged(iid) == cumulative_charge(RATE, CARDS, 600)
    assert Transfer.objects.filter(code="node_dark").count() == 1


def test_resume_clears_the_notice_and_charges_from_the_resume(client, dark_node):
    node, secret = dark_node
    iid = running(client)
    go_dark(node, iid)
    instances_dark_sweep()
    beat(secret)  # the agent is back
    assert client.get(f"{URL}{iid}/").json()["notices"] == []
    before = db_now()
    assert instances_dark_sweep()["resumed"] == 1
    assert DarkEpisode.objects.get(instance_id=iid).outcome == "resumed"
    fresh = Meter.objects.get(instance_id=iid, closed_at__isnull=True)
    assert fresh.opened_at >= before and (fresh.cards, fresh.rate) == (CARDS, RATE)
    meter_tick(now=fresh.opened_at + timedelta(seconds=100))
    assert net_charged(iid) == cumulative_charge(RATE, CARDS, 600) + cumulative_charge(RATE, CARDS, 100)
    assert ledger_verify() == []


def test_past_the_timeout_it_fails_with_its_cards_released(client, dark_node):
    node, _ = dark_node
    iid = running(client)
    go_dark(node, iid)
    instances_dark_sweep()
    assert instances_dark_sweep()["failed"] == 0  # not yet: the deadline is on the episode's row
    DarkEpisode.objects.update(deadline=db_now() - timedelta(seconds=1))
    assert instances_dark_sweep()["failed"] == 1
    inst = Instance.objects.get(pk=iid)
    assert (inst.state, inst.state_reason) == ("failed", DARK_FAILED)
    assert InstanceEvent.objects.filter(instance_id=iid, from_state="running", to_state="failed").exists()
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()
    assert not Meter.objects.filter(instance_id=iid, closed_at__isnull=True).exists()
    assert net_charged(iid) == cumulative_charge(RATE, CARDS, 600)
    assert sla_settle(instance_id=iid) == 0  # the window was met when it ran
    body = client.get(f"{URL}{iid}/").json()
    assert body["sla"]["breached"] is False and body["notices"] == []
    assert "did not come back in time" in client.get(f"/instances/{iid}/").content.decode()


def test_past_the_timeout_a_container_moves_to_other_cards(client, dark_node, zone, settings):
    settings.NODE_DARK_ACTION = "move"
    node, _ = dark_node
    iid = running(client)  # on the dark node: the other one is added after, so no index order can pick it
    other = NodeFactory(zone=zone, hostname="gpu-dark-02.test")
    go_dark(node, iid)
    instances_dark_sweep()
    DarkEpisode.objects.update(deadline=db_now() - timedelta(seconds=1))
    assert instances_dark_sweep()["moved"] == 1
    inst = Instance.objects.get(pk=iid)
    assert (inst.state, inst.state_reason) == ("provisioning", DARK_MOVED)
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True, card__node=node).exists()
    assert instance_advance(iid) == "running"
    live = NodeGroup.objects.get(instance_id=iid, released_at__isnull=True)
    assert live.node_id == other.pk and len(live.card_indices) == CARDS
    meter = Meter.objects.get(instance_id=iid, closed_at__isnull=True)
    assert meter.rate == RATE  # the locked rate, not re-priced
    assert net_charged(iid) == cumulative_charge(RATE, CARDS, 600)  # nothing for the move itself


def test_a_move_that_finds_no_cards_fails(client, dark_node, settings):
    settings.NODE_DARK_ACTION = "move"
    node, _ = dark_node
    iid = running(client)
    go_dark(node, iid)
    instances_dark_sweep()
    DarkEpisode.objects.update(deadline=db_now() - timedelta(seconds=1))
    assert instances_dark_sweep()["failed"] == 1
    assert Instance.objects.get(pk=iid).state == "failed"
    assert NodeGroup.objects.filter(instance_id=iid, node=node).exclude(released_at=None).exists()


def test_a_stop_while_dark_ends_the_episode(client, dark_node):
    node, _ = dark_node
    iid = running(client)
    go_dark(node, iid)
    instances_dark_sweep()
    assert client.post(f"{URL}{iid}/stop/").status_code == 202
    assert instances_dark_sweep()["left"] == 1
    assert net_charged(iid) == cumulative_charge(RATE, CARDS, 600)


def test_another_tenant_sees_neither_the_instance_nor_its_notice(client, dark_node, member_factory,
                                                                 session_client_for):
    node, _ = dark_node
    iid = running(client)
    go_dark(node, iid)
    other = session_client_for(member_factory(role="owner"))
    assert other.get(f"{URL}{iid}/").status_code == 404
    assert other.get(URL).json()["results"] == []


def test_operators_see_the_episode_on_the_instance_admin_page(client, dark_node, operator_client):
    node, _ = dark_node
    iid = running(client)
    go_dark(node, iid)
    instances_dark_sweep()
    page = operator_client.get(f"/admin/provisioning/instance/{iid}/change/").content.decode()
    assert "Dark episodes" in page and "<p>1.688889</p>" in page  # credited: 1000 s charged, 600 s owed
