"""Killing the agent of a node with a running instance: the real agent process against the live test server, a
real Celery worker running the steps and the dark sweep (dispatched by the heartbeat check through the outbox).
The user is told within one heartbeat timeout, the ledger charges exactly the seconds seen alive, and the
instance is charged again from the agent's return — or failed at the timeout without waiting on the dead agent."""
import signal
import time
from datetime import timedelta

import pytest
from django.db.models import Sum

from billing.models import Meter, Transfer
from billing.rating import cumulative_charge, whole_seconds
from billing.selectors import instance_metered_total
from billing.tick import meter_tick
from billing.verify import ledger_verify
from core.dbclock import db_now
from hardware.models import NodeCredential
from hardware.services import heartbeats_check
from inventory.models import CardAllocation
from provisioning.models import DarkEpisode, Instance
from provisioning.services.dark import DARK_FAILED
from provisioning.tasks import instances_dark_sweep_task
from tests.factories.hardware import agent_node
from tests.factories.inventory import ZoneFactory
from tests.factories.provisioning import container_body, funded, wait_for_state

from .conftest import heartbeats_settled, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.timeout(300),
              pytest.mark.django_db(transaction=True)]
URL = "/api/v1/instances/"
TIMEOUT = 3  # AGENT_HEARTBEAT_TIMEOUT_SECONDS here: the live server sets each heartbeat's deadline with it
CHECK_EVERY = 0.5  # how often this test runs the heartbeat check and the tick, as beat would
WORKER_ENV = {"AGENT_COMMAND_POLL_SECONDS": "0.05", "AGENT_COMMAND_TIMEOUT_SECONDS": "60",
              "SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0",
              "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend"}


def net_charged(iid) -> int:
    """What the ledger took for the instance: its meters' transfers less the dark-node credits."""
    def total(code):
        return Transfer.objects.filter(instance_id=iid, code=code).aggregate(s=Sum("amount"))["s"] or 0
    return instance_metered_total(iid) - total("node_dark")  # a tick's transfers name no instance


def _running_on_agent(live_server, start_agent, start_worker, member_factory, session_client_for, tmp_path,
                      hostname):
    zone = ZoneFactory(slug="zone-agent", name="zone-agent")
    node, token = agent_node(hostname=hostname, zone=zone)
    agent = start_agent(live_server.url, token)
    wait_for(lambda: NodeCredential.objects.filter(node=node, registered_at__isnull=False).exists(),
             timeout=30, what=f"agent registration\n{agent.log_tail()}")
    worker = start_worker(extra_env={**WORKER_ENV, "EMAIL_FILE_PATH": str(tmp_path / "mail")})
    owner = funded(member_factory(role="owner"))
    client = session_client_for(owner)
    r = client.post(URL, container_body("h100-sxm-80g", 8, zone="zone-agent"), format="json")
    assert r.status_code == 201, r.json()
    iid = r.json()["id"]
    wait_for_state(iid, "running", timeout=120, worker=worker)
    return node, token, agent, worker, owner, client, iid


def _kill_and_wait_for_the_notice(agent, node, client, iid):
    """SIGKILL the agent; run the check and the tick every CHECK_EVERY s until the API shows the notice.
    → (seconds from the kill to the notice, the notice, the agent's last heartbeat)."""
    agent.kill(signal.SIGKILL)
    killed = time.monotonic()
    heartbeats_settled(node, quiet=1.0)
    last = NodeCredential.objects.get(node=node).last_heartbeat_at

    def told():
        meter_tick()  # ticks keep charging past the last heartbeat until the platform notices
        heartbeats_check()
        return client.get(f"{URL}{iid}/").json()["notices"]
    notices = wait_for(told, timeout=30, interval=CHECK_EVERY, what="the notice")
    return time.monotonic() - killed, notices, last


def test_a_killed_agent_tells_the_user_and_its_dark_period_is_not_charged(
        live_server, start_agent, start_worker, member_factory, session_client_for, settings, tmp_path):
    settings.AGENT_HEARTBEAT_TIMEOUT_SECONDS = TIMEOUT
    node, token, agent, worker, owner, client, iid = _running_on_agent(
        live_server, start_agent, start_worker, member_factory, session_client_for, tmp_path, "gpu-agent-20.test")
    meter = Meter.objects.get(instance_id=iid, closed_at__isnull=True)
    rate, cards = meter.rate, meter.cards
    time.sleep(1.5)
    meter_tick()
    assert Meter.objects.get(pk=meter.pk).posted_amount > 0  # billed while alive

    told_after, notices, last = _kill_and_wait_for_the_notice(agent, node, client, iid)
    # One heartbeat timeout after the last heartbeat (sent at most 0.3 s before the kill), plus one check interval.
    assert told_after <= TIMEOUT + CHECK_EVERY + 1.0, told_after
    assert [(n["code"], n["node"], n["billing"]) for n in notices] == [("node_unreachable", node.hostname, "paused")]
    assert 'id="notice-node_unreachable"' in client.get(f"/instances/{iid}/").content.decode()

    # The worker's sweep closed the meter at the last heartbeat and gave back what ticks charged after it.
    episode = wait_for(lambda: DarkEpisode.objects.filter(instance_id=iid).first(), timeout=30,
                       what=f"the dark episode\n{worker.log_tail()}")
    meter.refresh_from_db()
    assert episode.last_heartbeat_at == last == episode.paused_at == meter.closed_at
    alive = whole_seconds(meter.opened_at, last)
    assert meter.posted_through_seconds > alive and episode.credited > 0  # a tick did charge dark seconds
    assert net_charged(iid) == cumulative_charge(rate, cards, alive)
    time.sleep(1.5)
    meter_tick()
    assert net_charged(iid) == cumulative_charge(rate, cards, alive)  # nothing while dark
    mails = wait_for(lambda: list((tmp_path / "mail").glob("*")), timeout=30, what="the email")
    sent = mails[0].read_text()
    assert len(mails) == 1 and owner.user.email in sent and "is unreachable" in sent

    # The agent comes back (same host, same state): the notice goes, billing starts again from its return.
    back = db_now()
    again = start_agent(live_server.url, token, state_dir=agent.state_dir)
    fresh = wait_for(lambda: Meter.objects.filter(instance_id=iid, closed_at__isnull=True).first(), timeout=30,
                     what=f"the meter to open again\n{again.log_tail()}\n{worker.log_tail()}")
    assert client.get(f"{URL}{iid}/").json()["notices"] == []
    assert DarkEpisode.objects.get(pk=episode.pk).outcome == "resumed"
    assert fresh.opened_at > back > last and (fresh.rate, fresh.cards) == (rate, cards)
    time.sleep(1.5)
    meter_tick()
    fresh.refresh_from_db()
    assert fresh.posted_through_seconds > 0
    assert net_charged(iid) == cumulative_charge(rate, cards, alive) + cumulative_charge(
        rate, cards, fresh.posted_through_seconds)
    assert ledger_verify() == []
    assert Instance.objects.get(pk=iid).state == "running"
    assert client.delete(f"{URL}{iid}/").status_code == 202
    wait_for_state(iid, "terminated", timeout=120, worker=worker)


def test_a_node_dark_past_the_timeout_fails_its_instance_without_waiting_on_the_agent(
        live_server, start_agent, start_worker, member_factory, session_client_for, settings, tmp_path):
    settings.AGENT_HEARTBEAT_TIMEOUT_SECONDS = TIMEOUT
    node, token, agent, worker, owner, client, iid = _running_on_agent(
        live_server, start_agent, start_worker, member_factory, session_client_for, tmp_path, "gpu-agent-21.test")
    _, _, last = _kill_and_wait_for_the_notice(agent, node, client, iid)
    wait_for(lambda: DarkEpisode.objects.filter(instance_id=iid).exists(), timeout=30,
             what=f"the dark episode\n{worker.log_tail()}")
    # The timeout (NODE_DARK_TIMEOUT_SECONDS) is on the episode's row: move it instead of the clock; beat's sweep.
    DarkEpisode.objects.filter(instance_id=iid).update(deadline=db_now() - timedelta(seconds=1))
    started = time.monotonic()
    instances_dark_sweep_task.delay()
    inst = wait_for_state(iid, "failed", timeout=30, worker=worker)
    assert inst.state_reason == DARK_FAILED
    wait_for(lambda: not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists(),
             timeout=30, what=f"the cards to be released\n{worker.log_tail()}")
    assert time.monotonic() - started < 30  # the release command's 60 s timeout on the dead agent was not awaited
    assert DarkEpisode.objects.get(instance_id=iid).outcome == "failed"
    alive = whole_seconds(Meter.objects.get(instance_id=iid).opened_at, last)
    assert net_charged(iid) == cumulative_charge(1_900_000, 8, alive)
    assert client.get(f"{URL}{iid}/").json()["sla"]["breached"] is False
