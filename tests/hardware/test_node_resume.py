"""A node marked unreachable for a missed heartbeat comes back, at the agent's next heartbeat, in the state
and with the reason it had: a draining or cleaning node never slips back into the pool."""
from datetime import timedelta

import pytest
from rest_framework.test import APIClient

from core.dbclock import db_now
from hardware.models import NodeCredential
from hardware.services import heartbeats_check
from inventory.choices import NodeState
from inventory.models import Node
from inventory.services import node_set_state
from tests.factories.hardware import agent_node
from tests.races import race_with_operator_quarantine

HEARTBEAT = {"agent_version": "1.0.0", "hostname": "h", "runtime": "process"}


def beat(secret):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.post("/api/v1/agent/heartbeat/", HEARTBEAT, format="json").status_code == 200


def miss_deadline(node):
    NodeCredential.objects.filter(node=node).update(heartbeat_deadline=db_now() - timedelta(seconds=1))


@pytest.mark.django_db
@pytest.mark.parametrize("state,reason", [(NodeState.DRAINING, "operator: firmware update"),
                                          (NodeState.CLEANING, "cleaning after a bare-metal instance")])
def test_heartbeat_restores_the_state_before_unreachable(state, reason):
    node, secret = agent_node()
    beat(secret)
    node_set_state(node=node, state=state, reason=reason)
    miss_deadline(node)
    assert heartbeats_check() == [node.hostname]
    assert Node.objects.get(pk=node.pk).state == NodeState.UNREACHABLE
    beat(secret)
    node.refresh_from_db()
    assert (node.state, node.state_reason) == (state, reason)
    assert NodeCredential.objects.get(node=node).resume_state == ""  # used once
    beat(secret)
    assert Node.objects.get(pk=node.pk).state == state


@pytest.mark.django_db
def test_an_available_node_returns_to_available():
    node, secret = agent_node()
    beat(secret)
    miss_deadline(node)
    assert heartbeats_check() == [node.hostname]
    beat(secret)
    node.refresh_from_db()
    assert (node.state, node.state_reason) == (NodeState.AVAILABLE, "agent heartbeat resumed")


@pytest.mark.django_db
def test_an_operator_change_while_unreachable_stands():
    node, secret = agent_node()
    beat(secret)
    node_set_state(node=node, state=NodeState.DRAINING, reason="operator: drain")
    miss_deadline(node)
    heartbeats_check()
    node_set_state(node=node, state=NodeState.QUARANTINED, reason="operator: bad PSU")
    beat(secret)
    node.refresh_from_db()
    assert (node.state, node.state_reason) == (NodeState.QUARANTINED, "operator: bad PSU")


@pytest.mark.django_db(transaction=True)
def test_the_check_decides_under_the_node_lock():
    """An operator's quarantine committed while the check waits for the node's row lock is not overwritten."""
    node, secret = agent_node()
    beat(secret)
    miss_deadline(node)
    assert race_with_operator_quarantine(node, heartbeats_check) == [[]]  # nothing marked
    node.refresh_from_db()
    assert node.state == NodeState.QUARANTINED


@pytest.mark.django_db(transaction=True)
def test_the_returning_heartbeat_decides_under_the_node_lock():
    """An operator's quarantine of the unreachable node, committed while the heartbeat waits for the lock, stands."""
    node, secret = agent_node()
    beat(secret)
    miss_deadline(node)
    assert heartbeats_check() == [node.hostname]
    race_with_operator_quarantine(node, lambda: beat(secret))
    node.refresh_from_db()
    assert (node.state, node.state_reason) == (NodeState.QUARANTINED, "operator: bad PSU")
