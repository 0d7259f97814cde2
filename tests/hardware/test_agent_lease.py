"""Leases on agent commands (agents from 1.3.0 claim with `?lease=1`): a command handed out must be acknowledged
as started (POST …/start/) before its lease runs out (DB clock), else it goes back to the queue and is handed out
again, so an agent killed between the claim and the start, or a poll answer lost on the way, no longer costs the
command's whole timeout. A start after the lease is refused (409) and the agent does not run it. A claim without
`lease=1` (older agents) is served as before. Leases are made short with settings; the tests wait on the DB clock.
"""
import threading
from datetime import datetime, timedelta

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from core.dbclock import db_now
from hardware import services
from hardware.models import AgentCommand, NodeCredential
from hardware.services import agent_command_enqueue, agent_commands_claim
from provisioning.drivers.agent import AgentDriver
from provisioning.services.fleet import node_ref
from tests.factories.hardware import agent_node
from tests.races import Aside

from .conftest import wait_for

pytestmark = pytest.mark.django_db
LEASE = "/api/v1/agent/commands/?limit=1&lease=1"
SHORT = 0.2  # seconds: the lease in these tests
PREPARE = {"kind": "container", "cards": [0, 1], "instance_id": "inst-1", "name": "cardmix-inst-1-0"}


def node_client(secret):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def claim(client, path=LEASE) -> list:
    response = client.get(path)
    assert response.status_code == 200, response.content
    return response.json()["results"]


def start(client, command, lease=None):
    lease = command["lease"] if lease is None else lease
    return client.post(f"/api/v1/agent/commands/{command['id']}/start/", {"lease": lease}, format="json")


def lease_over(command) -> None:
    """Wait until the DB clock is past the lease the command was handed out with."""
    until = datetime.fromisoformat(command["lease_until"].replace("Z", "+00:00"))
    wait_for(lambda: db_now() > until, timeout=10, what="the lease to run out")


@override_settings(AGENT_COMMAND_LEASE_SECONDS=SHORT)
def test_a_leased_command_never_acknowledged_is_handed_out_again_after_its_lease():
    node, secret = agent_node()
    cmd = agent_command_enqueue(node_id=node.pk, kind="topology", payload={}, timeout_s=600)
    client = node_client(secret)
    first = claim(client)  # the answer is lost on the way, or the agent dies before it starts the command
    assert [c["id"] for c in first] == [str(cmd.pk)] and first[0]["lease"] and first[0]["lease_until"]
    # Before: delivered for good; the driver waited the whole timeout for a command nobody ran.
    again = wait_for(lambda: claim(client), timeout=10, what="the command to be handed out again")
    assert [c["id"] for c in again] == [str(cmd.pk)] and again[0]["lease"] != first[0]["lease"]
    started = start(client, again[0])
    assert started.status_code == 200 and started.json()["state"] == "delivered", started.content
    row = AgentCommand.objects.get(pk=cmd.pk)
    assert row.started_at is not None and row.lease_until is None
    lease_over(again[0])
    assert claim(client) == []  # started: never handed out again, however long it runs
    done = client.post(f"/api/v1/agent/commands/{cmd.pk}/result/", {"exit_code": 0, "output": "GPU0"}, format="json")
    assert done.status_code == 200 and done.json()["state"] == "done"


@override_settings(AGENT_COMMAND_LEASE_SECONDS=SHORT)
def test_a_start_after_the_lease_ran_out_is_refused():
    node, secret = agent_node()
    cmd = agent_command_enqueue(node_id=node.pk, kind="wipe", payload={}, timeout_s=600)
    client = node_client(secret)
    first = claim(client)[0]
    lease_over(first)
    late = start(client, first)  # before: there was nothing to ask, the agent just ran it
    assert late.status_code == 409 and late.json()["error"]["code"] == "invalid_state", late.content
    assert AgentCommand.objects.get(pk=cmd.pk).started_at is None
    second = claim(client)[0]  # handed out again, under a new lease
    stale = start(client, first)  # the first delivery's lease does not start the second one
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "invalid_state"
    assert start(client, second).status_code == 200
    assert start(client, second).status_code == 200  # a repeat (its answer was lost) answers the same


def test_a_start_for_a_command_the_platform_stopped_waiting_for_is_refused():
    node, secret = agent_node()
    cmd = agent_command_enqueue(node_id=node.pk, kind="wipe", payload={}, timeout_s=600)
    client = node_client(secret)
    command = claim(client)[0]
    AgentCommand.objects.filter(pk=cmd.pk).update(state="expired")  # the driver's deadline passed
    refused = start(client, command)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "invalid_state"


NOT_RUN = {"exit_code": 75, "output": "cardmix-agent: did not run this command (wipe): …\n",
           "meta": {"not_run": True}}


def test_a_result_for_a_command_that_never_started_is_refused_and_the_command_handed_out_again():
    """An agent whose start acknowledgement got no answer (or that died while sending it) says it did not run the
    command. The platform never saw that start: the answer is refused, the lease taken back at once (a start still
    on the way is refused too: never started with nobody running it), and the command is handed out again."""
    node, secret = agent_node()
    cmd = agent_command_enqueue(node_id=node.pk, kind="wipe", payload={}, timeout_s=600)
    client = node_client(secret)
    result = f"/api/v1/agent/commands/{cmd.pk}/result/"
    queued = client.post(result, NOT_RUN, format="json")
    assert queued.status_code == 409 and queued.json()["error"]["code"] == "invalid_state", queued.content
    first = claim(client)[0]
    not_run = {**NOT_RUN, "lease": first["lease"]}
    leased = client.post(result, not_run, format="json")  # before: stored, so the wipe was never run at all
    assert leased.status_code == 409 and "never started" in leased.json()["error"]["message"]
    row = AgentCommand.objects.get(pk=cmd.pk)
    assert (row.state, row.lease_id, row.lease_until, row.started_at) == ("queued", None, None, None)
    late = start(client, first)  # the start the agent gave up on, reaching the platform only now
    assert late.status_code == 409 and AgentCommand.objects.get(pk=cmd.pk).started_at is None
    again = claim(client)[0]  # at once, not after the lease
    assert again["id"] == str(cmd.pk) and again["lease"] != first["lease"]
    assert start(client, again).status_code == 200
    # A copy of the not-run answer delayed on the way lands now, on the hand-out that runs: it changes nothing.
    delayed = client.post(result, not_run, format="json")
    assert delayed.status_code == 409 and "earlier hand-out" in delayed.json()["error"]["message"]
    assert AgentCommand.objects.get(pk=cmd.pk).state == "delivered"
    done = client.post(result, {"exit_code": 0, "output": "wiped\n"}, format="json")
    assert done.status_code == 200 and AgentCommand.objects.get(pk=cmd.pk).output == "wiped\n"


def test_a_not_run_answer_for_a_start_the_platform_recorded_ends_the_wait_at_once():
    """The start was accepted but its answer lost: the agent did not run it and says so; the driver's wait ends
    with that answer instead of at the command's deadline."""
    node, secret = agent_node()
    cmd = agent_command_enqueue(node_id=node.pk, kind="wipe", payload={}, timeout_s=600)
    client = node_client(secret)
    handed = claim(client)[0]
    assert start(client, handed).status_code == 200  # its answer never reached the agent
    answered = client.post(f"/api/v1/agent/commands/{cmd.pk}/result/", {**NOT_RUN, "lease": handed["lease"]},
                           format="json")
    assert answered.status_code == 200, answered.content
    row = services.agent_command_wait(command_id=cmd.pk, poll_s=0.05)
    assert (row.state, row.exit_code, row.meta) == ("done", 75, {"not_run": True})


def test_only_the_nodes_own_agent_can_start_a_command(member_factory, token_client_for, session_client_for):
    node_a, secret_a = agent_node()
    _, secret_b = agent_node()
    cmd = agent_command_enqueue(node_id=node_a.pk, kind="topology", payload={}, timeout_s=600)
    command = claim(node_client(secret_a))[0]
    foreign = start(node_client(secret_b), command)
    assert foreign.status_code == 404 and foreign.json()["error"]["code"] == "not_found"
    membership = member_factory(role="owner")
    url = f"/api/v1/agent/commands/{cmd.pk}/start/"
    assert token_client_for(membership).post(url, {"lease": command["lease"]}, format="json").status_code == 401
    assert session_client_for(membership).post(url, {"lease": command["lease"]}, format="json").status_code == 401
    assert APIClient().post(url, {"lease": command["lease"]}, format="json").status_code == 401
    assert AgentCommand.objects.get(pk=cmd.pk).started_at is None
    assert start(node_client(secret_a), command).status_code == 200


@override_settings(AGENT_COMMAND_LEASE_SECONDS=SHORT)
def test_a_claim_without_a_lease_is_served_as_before():
    node, secret = agent_node()
    cmd = agent_command_enqueue(node_id=node.pk, kind="topology", payload={}, timeout_s=600)
    client = node_client(secret)
    handed = claim(client, "/api/v1/agent/commands/?limit=1")
    assert [set(c) for c in handed] == [{"id", "kind", "payload", "deadline"}]  # no lease, nothing to acknowledge
    row = AgentCommand.objects.get(pk=cmd.pk)
    assert row.state == "delivered"
    wait_for(lambda: db_now() > row.delivered_at + timedelta(seconds=2 * SHORT), timeout=10, what="a lease's time")
    assert claim(client) == [] and claim(client, "/api/v1/agent/commands/") == []  # handed out once, as before
    done = client.post(f"/api/v1/agent/commands/{cmd.pk}/result/", {"exit_code": 0, "output": "ok"}, format="json")
    assert done.status_code == 200 and done.json()["state"] == "done"


@override_settings(AGENT_COMMAND_LEASE_SECONDS=SHORT)
def test_a_release_withdraws_a_prepare_the_agent_has_not_started():
    node, secret = agent_node()
    prepare = agent_command_enqueue(node_id=node.pk, kind="prepare", payload=PREPARE, timeout_s=600)
    client = node_client(secret)
    command = claim(client)[0]  # handed out under a lease, not started (yet)
    out = AgentDriver(timeout_s=30, poll_s=0.05).release(node_ref(node), [0, 1], instance_id="inst-1")
    assert out.exit_code == 0 and out.meta["skipped"] is True, out.text  # nothing can run on the freed cards
    assert AgentCommand.objects.get(pk=prepare.pk).state == "expired"
    refused = start(client, command)  # the agent's start comes too late: it does not run the prepare
    assert refused.status_code == 409
    lease_over(command)
    assert claim(client) == []  # and it is never handed out again


def test_a_release_follows_a_prepare_the_agent_started():
    node, secret = agent_node()
    agent_command_enqueue(node_id=node.pk, kind="prepare", payload=PREPARE, timeout_s=600)
    client = node_client(secret)
    assert start(client, claim(client)[0]).status_code == 200  # a container may be starting
    out = AgentDriver(timeout_s=0.5, poll_s=0.05).release(node_ref(node), [0, 1], instance_id="inst-1")
    assert out.exit_code == 124  # no agent answered in this test: the release was really sent
    assert AgentCommand.objects.filter(kind="release").count() == 1


@override_settings(AGENT_COMMAND_LEASE_SECONDS=SHORT)
def test_a_prepare_put_back_after_its_lease_is_withdrawn_like_a_queued_one():
    node, secret = agent_node()
    older = agent_command_enqueue(node_id=node.pk, kind="topology", payload={}, timeout_s=600)
    prepare = agent_command_enqueue(node_id=node.pk, kind="prepare", payload=PREPARE, timeout_s=600)
    client = node_client(secret)
    both = claim(client, "/api/v1/agent/commands/?limit=2&lease=1")
    assert [c["id"] for c in both] == [str(older.pk), str(prepare.pk)]
    lease_over(both[1])  # neither was started: the next claim puts both back and hands out the older one again
    assert [c["id"] for c in claim(client)] == [str(older.pk)]
    assert AgentCommand.objects.get(pk=prepare.pk).state == "queued"
    out = AgentDriver(timeout_s=30, poll_s=0.05).release(node_ref(node), [0, 1], instance_id="inst-1")
    assert out.exit_code == 0 and out.meta["skipped"] is True, out.text
    assert AgentCommand.objects.get(pk=prepare.pk).state == "expired"
    again = wait_for(lambda: claim(client), timeout=10, what="the older command's next lease")
    assert [c["id"] for c in again] == [str(older.pk)]  # the withdrawn prepare is never handed out again


@override_settings(AGENT_COMMAND_LEASE_SECONDS=SHORT)
def test_nothing_newer_is_handed_out_while_an_older_command_waits_on_its_lease():
    node, secret = agent_node()
    # A release lost on the way must not run after the prepare queued behind it (it would remove the new container).
    release = agent_command_enqueue(node_id=node.pk, kind="release", payload=PREPARE, timeout_s=600)
    prepare = agent_command_enqueue(node_id=node.pk, kind="prepare", payload=PREPARE, timeout_s=600)
    client = node_client(secret)
    lost = claim(client)[0]
    assert lost["id"] == str(release.pk)
    assert claim(client) == []  # the agent may still start it: the prepare waits
    assert AgentCommand.objects.get(pk=prepare.pk).state == "queued"
    again = wait_for(lambda: claim(client), timeout=10, what="the release to come back")
    assert [c["id"] for c in again] == [str(release.pk)]
    assert start(client, again[0]).status_code == 200
    assert [c["id"] for c in claim(client)] == [str(prepare.pk)]  # the release started: the prepare follows


@pytest.mark.django_db(transaction=True)
def test_two_claims_of_one_node_at_once_never_hand_out_a_newer_command_first(monkeypatch):
    node, _ = agent_node()
    # A poll the agent gave up on (its answer lost) still runs while its next poll comes in.
    release = agent_command_enqueue(node_id=node.pk, kind="release", payload=PREPARE, timeout_s=600)
    prepare = agent_command_enqueue(node_id=node.pk, kind="prepare", payload=PREPARE, timeout_s=600)
    cred = NodeCredential.objects.get(node_id=node.pk)
    inside, go_on, real, paused = threading.Event(), threading.Event(), services.db_now, []

    def db_now_first_claim_pauses():  # the first claim holds its transaction open after picking its command
        if not paused:
            paused.append(True)
            inside.set()
            go_on.wait(10)
        return real()

    monkeypatch.setattr(services, "db_now", db_now_first_claim_pauses)
    first = Aside(lambda: agent_commands_claim(credential=cred, limit=1, lease=True))
    assert inside.wait(10)
    second = Aside(lambda: agent_commands_claim(credential=cred, limit=1, lease=True))
    second.running(0.5)  # before: it skipped the release the first was leasing and handed out the prepare
    go_on.set()
    assert [c.pk for c in first.result()] == [release.pk]
    assert second.result() == []  # the release's lease runs: the prepare waits behind it
    assert AgentCommand.objects.get(pk=prepare.pk).state == "queued"


@pytest.mark.django_db(transaction=True)
def test_a_lapsed_lease_whose_start_is_in_flight_still_holds_back_the_command_behind_it():
    """The older command's lease ran out while its start acknowledgement holds its row: the claim's re-queue skips
    that row, and the start may yet win; the command queued behind it must not be handed out meanwhile."""
    from django.db import transaction

    node, _ = agent_node()
    release = agent_command_enqueue(node_id=node.pk, kind="release", payload=PREPARE, timeout_s=600)
    prepare = agent_command_enqueue(node_id=node.pk, kind="prepare", payload=PREPARE, timeout_s=600)
    cred = NodeCredential.objects.get(node_id=node.pk)
    assert [c.pk for c in agent_commands_claim(credential=cred, limit=1, lease=True)] == [release.pk]
    AgentCommand.objects.filter(pk=release.pk).update(lease_until=db_now() - timedelta(seconds=1))
    locked, done = threading.Event(), threading.Event()

    def start_in_flight():  # what agent_command_start holds while it decides
        with transaction.atomic():
            list(AgentCommand.objects.select_for_update().filter(pk=release.pk))
            locked.set()
            done.wait(10)

    holder = Aside(start_in_flight)
    try:
        assert locked.wait(10)
        assert agent_commands_claim(credential=cred, limit=1, lease=True) == []  # before: the prepare
    finally:
        done.set()
        holder.result()
    assert AgentCommand.objects.get(pk=prepare.pk).state == "queued"
