"""A release through the agent driver when the agent never received the prepare (e.g. the agent is dead):
nothing runs on the node, so it answers at once instead of waiting out the command timeout, and a prepare
still queued is withdrawn so the agent can never start it on cards the platform is freeing."""
import time

import pytest
from rest_framework.test import APIClient

from hardware.models import AgentCommand
from hardware.services import agent_command_enqueue
from provisioning.drivers.agent import AgentDriver
from provisioning.services.fleet import node_ref
from tests.factories.hardware import agent_node

pytestmark = pytest.mark.django_db
PREPARE = {"kind": "container", "cards": [0, 1], "instance_id": "inst-1", "name": "cardmix-inst-1-0"}


def _polls(secret) -> list:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client.get("/api/v1/agent/commands/").json()["results"]


def test_a_prepare_never_handed_out_is_withdrawn_and_the_release_answers_at_once():
    node, secret = agent_node()
    queued = agent_command_enqueue(node_id=node.pk, kind="prepare", payload=PREPARE, timeout_s=600)
    started = time.monotonic()
    out = AgentDriver(timeout_s=30, poll_s=0.05).release(node_ref(node), [0, 1], instance_id="inst-1")
    assert time.monotonic() - started < 5  # before: waited out the 30 s for an agent that never answers
    assert out.exit_code == 0 and "nothing to release" in out.text and out.meta["skipped"] is True
    assert AgentCommand.objects.get(pk=queued.pk).state == "expired"
    assert not AgentCommand.objects.filter(kind="release").exists()
    assert _polls(secret) == []  # the agent, back later, is never handed the stale prepare


def test_a_prepare_the_agent_received_gets_a_real_release():
    node, secret = agent_node()
    agent_command_enqueue(node_id=node.pk, kind="prepare", payload=PREPARE, timeout_s=600)
    assert [c["kind"] for c in _polls(secret)] == ["prepare"]  # delivered: a container may be starting
    out = AgentDriver(timeout_s=0.5, poll_s=0.05).release(node_ref(node), [0, 1], instance_id="inst-1")
    assert out.exit_code == 124  # no agent answered in this test: the release was really sent
    release = AgentCommand.objects.get(kind="release")
    assert release.payload == {"cards": [0, 1], "instance_id": "inst-1", "name": "cardmix-inst-1-0"}


def test_another_containers_prepare_does_not_count():
    node, secret = agent_node()
    agent_command_enqueue(node_id=node.pk, kind="prepare", payload={**PREPARE, "cards": [2, 3],
                                                                     "name": "cardmix-inst-1-2"}, timeout_s=600)
    assert len(_polls(secret)) == 1
    out = AgentDriver(timeout_s=0.5, poll_s=0.05).release(node_ref(node), [0, 1], instance_id="inst-1")
    assert out.exit_code == 0 and out.meta["skipped"] is True
