"""Node cleaning writes its outcome only to a node it is still cleaning: a redelivered task never wipes a
node back in the pool, an operator's change during the wipe stands, an operator state keeps its reason,
and a node whose agent went missing during the wipe comes back with the outcome. Only one pass wipes at a
time: the pass claims the node under its row lock, and a claim whose worker died expires."""
import subprocess
import threading
import time
from datetime import timedelta
from unittest import mock

import pytest
from celery.exceptions import Retry
from django.conf import settings
from django.db import connection, transaction

from core.dbclock import db_now
from hardware.models import NodeCredential
from hardware.services import agent_heartbeat, heartbeats_check
from inventory.choices import NodeState
from inventory.lock_objects import node_lock
from inventory.models import Node
from inventory.services import node_set_state
from provisioning.drivers.base import DriverOutput
from provisioning.services import cleaning
from provisioning.tasks import NODE_CLEAN_RECHECK_MAX_S, node_clean_task
from tests.factories.hardware import agent_node
from tests.races import Aside, race_with_operator_quarantine

from .conftest import BIN

# What a healthy card prints (the fake nvidia-smi the agent tests use).
OK_HEALTH = subprocess.run([str(BIN / "nvidia-smi"), "-q", "-i", "0", "-d", "ECC,ROW_REMAPPER"], capture_output=True,
                           text=True, check=True).stdout


class RecordingDriver:
    """Stands in for the node's hardware: records wipes; `during_wipe` runs while the wipe 'runs'."""

    def __init__(self, during_wipe=None, wipe_exit=0):
        self.wipes, self.during_wipe, self.wipe_exit = 0, during_wipe, wipe_exit

    def wipe(self, ref):
        self.wipes += 1
        if self.during_wipe:
            self.during_wipe()
        return DriverOutput("blkdiscard /dev/nvme1n1: ok\n" if not self.wipe_exit else "agent did not answer\n",
                            self.wipe_exit, 0.1, {})

    def health_check(self, ref, card):
        return DriverOutput(OK_HEALTH, 0, 0.1, {})


@pytest.fixture
def driver(monkeypatch):
    def install(**kwargs):
        drv = RecordingDriver(**kwargs)
        monkeypatch.setattr(cleaning, "driver_for", lambda node: drv)
        return drv
    return install


def begin(node, state=None, reason=None):
    """As the steps do: the node goes `cleaning` (the task itself is run by the test)."""
    if state:
        node_set_state(node=node, state=state, reason=reason)
    previous = Node.objects.get(pk=node.pk).state
    node_set_state(node=node, state=NodeState.CLEANING, reason="cleaning after a bare-metal instance")
    return previous


def fresh(node):
    return Node.objects.get(pk=node.pk)


@pytest.mark.django_db
def test_clean_pass_returns_the_node_to_the_pool(driver):
    node, _ = agent_node()
    drv = driver()
    out = cleaning.node_clean(node=node, previous_state=begin(node))
    assert drv.wipes == 1
    assert (out.state, fresh(node).state) == (NodeState.AVAILABLE, NodeState.AVAILABLE)
    assert fresh(node).state_reason == f"cleaned: disks wiped, {node.card_count} card(s) healthy"


@pytest.mark.django_db
@pytest.mark.parametrize("state", [NodeState.AVAILABLE, NodeState.DRAINING, NodeState.QUARANTINED])
def test_a_redelivered_task_does_not_touch_a_node_that_is_not_cleaning(driver, state):
    node, _ = agent_node()
    drv = driver()
    cleaning.node_clean(node=node, previous_state=begin(node))
    if state != NodeState.AVAILABLE:
        node_set_state(node=node, state=state, reason="operator: something")
    before = fresh(node)
    out = cleaning.node_clean(node=node, previous_state=NodeState.AVAILABLE)  # the same task, delivered again
    assert drv.wipes == 1  # a new tenant's disks are never wiped
    after = fresh(node)
    assert (out.state, after.state, after.state_reason) == (state, before.state, before.state_reason)
    assert after.state_changed_at == before.state_changed_at


@pytest.mark.django_db
def test_an_operator_quarantine_during_the_wipe_stands(driver):
    node, _ = agent_node()
    driver(during_wipe=lambda: node_set_state(node=fresh(node), state=NodeState.QUARANTINED,
                                              reason="operator: bad PSU"))
    out = cleaning.node_clean(node=node, previous_state=begin(node))
    assert out.state == NodeState.QUARANTINED
    assert (fresh(node).state, fresh(node).state_reason) == (NodeState.QUARANTINED, "operator: bad PSU")


@pytest.mark.django_db
def test_a_failed_clean_does_not_overwrite_an_operator_change_either(driver):
    node, _ = agent_node()
    driver(wipe_exit=124, during_wipe=lambda: node_set_state(node=fresh(node), state=NodeState.RETIRED,
                                                             reason="operator: decommissioned"))
    cleaning.node_clean(node=node, previous_state=begin(node))
    assert fresh(node).state == NodeState.RETIRED


@pytest.mark.django_db
@pytest.mark.parametrize("state", [NodeState.DRAINING, NodeState.MAINTENANCE])
def test_an_operator_state_comes_back_with_its_reason(driver, state):
    node, _ = agent_node()
    driver()
    previous = begin(node, state, "operator: move to rack 7")
    out = cleaning.node_clean(node=node, previous_state=previous)
    assert (out.state, out.state_reason) == (state, "operator: move to rack 7 (cleaned)")
    # A second clean of the same node does not stack the suffix.
    out = cleaning.node_clean(node=node, previous_state=begin(node))
    assert out.state_reason == "operator: move to rack 7 (cleaned)"


@pytest.mark.django_db
@pytest.mark.parametrize("wipe_exit,outcome", [(124, NodeState.MAINTENANCE), (0, NodeState.AVAILABLE)])
def test_an_agent_missing_during_the_wipe_brings_the_outcome_back(driver, wipe_exit, outcome):
    node, secret = agent_node()
    cred = NodeCredential.objects.get(node=node)
    agent_heartbeat(credential=cred, report={"agent_version": "1", "runtime": "process"})

    def agent_goes_missing():
        NodeCredential.objects.filter(node=node).update(heartbeat_deadline=db_now() - timedelta(seconds=1))
        assert heartbeats_check() == [node.hostname]

    driver(wipe_exit=wipe_exit, during_wipe=agent_goes_missing)
    cleaning.node_clean(node=node, previous_state=begin(node))
    assert fresh(node).state == NodeState.UNREACHABLE  # nothing is placed there while the agent is gone
    agent_heartbeat(credential=cred, report={"agent_version": "1", "runtime": "process"})
    assert fresh(node).state == outcome
    if outcome == NodeState.MAINTENANCE:
        assert fresh(node).state_reason.startswith("cleaning failed: wipe failed (exit 124)")


@pytest.mark.django_db
def test_a_task_that_starts_while_the_agent_is_missing_still_cleans(driver):
    node, _ = agent_node()
    cred = NodeCredential.objects.get(node=node)
    agent_heartbeat(credential=cred, report={"agent_version": "1", "runtime": "process"})
    previous = begin(node)
    NodeCredential.objects.filter(node=node).update(heartbeat_deadline=db_now() - timedelta(seconds=1))
    heartbeats_check()
    drv = driver()
    cleaning.node_clean(node=node, previous_state=previous)
    assert drv.wipes == 1
    agent_heartbeat(credential=cred, report={"agent_version": "1", "runtime": "process"})
    assert fresh(node).state == NodeState.AVAILABLE


@pytest.mark.django_db(transaction=True)
def test_the_outcome_is_decided_under_the_node_lock(driver):
    """An operator's quarantine committed while the outcome waits for the node's row lock stands."""
    node, _ = agent_node()
    started, done = threading.Event(), threading.Event()

    def operator():
        try:
            with transaction.atomic():
                row = node_lock(node.pk)
                started.set()
                give_up = time.monotonic() + 10
                with connection.cursor() as cur:  # hold the lock until the clean waits on it
                    while time.monotonic() < give_up:
                        cur.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'")
                        if cur.fetchone()[0]:
                            break
                        time.sleep(0.02)
                row.state, row.state_reason = NodeState.QUARANTINED, "operator: bad PSU"
                row.save(update_fields=["state", "state_reason"])
        finally:
            done.set()
            connection.close()

    def start_operator():
        threading.Thread(target=operator).start()
        assert started.wait(10)

    driver(during_wipe=start_operator)
    cleaning.node_clean(node=node, previous_state=begin(node))
    assert done.wait(10)
    assert (fresh(node).state, fresh(node).state_reason) == (NodeState.QUARANTINED, "operator: bad PSU")


class WorkerKilled(BaseException):
    """The worker process dies mid-wipe (nothing in it gets to run `except Exception`)."""


def expire_claim(node):
    Node.objects.filter(pk=node.pk).update(clean_claim_until=db_now() - timedelta(seconds=1))


@pytest.mark.django_db(transaction=True)
def test_two_tasks_at_once_wipe_the_node_once(driver):
    """A task redelivered while the first still wipes finds the pass taken: it wipes nothing, writes nothing."""
    node, _ = agent_node()
    wiping, finish = threading.Event(), threading.Event()

    def first_wipe_waits():
        if drv.wipes == 1:
            wiping.set()
            finish.wait(10)

    drv = driver(during_wipe=first_wipe_waits)
    previous = begin(node)
    first = Aside(lambda: cleaning.node_clean(node=node, previous_state=previous))
    assert wiping.wait(10)
    try:
        second = cleaning.node_clean(node=node, previous_state=previous)
    except Exception as exc:  # noqa: BLE001 - checked below, after the wipe count
        second = exc
    assert drv.wipes == 1
    assert isinstance(second, cleaning.PassTaken)
    assert 0 < second.retry_after <= settings.NODE_CLEAN_CLAIM_SECONDS
    assert fresh(node).state == NodeState.CLEANING
    finish.set()
    assert first.result().state == NodeState.AVAILABLE
    assert (drv.wipes, fresh(node).state, fresh(node).clean_claim) == (1, NodeState.AVAILABLE, None)


@pytest.mark.django_db(transaction=True)
def test_the_pass_is_claimed_under_the_node_lock(driver):
    """An operator's quarantine committed while the task waits for the node's row lock: nothing is wiped."""
    node, _ = agent_node()
    drv = driver()
    previous = begin(node)
    [out] = race_with_operator_quarantine(node, lambda: cleaning.node_clean(node=node, previous_state=previous))
    assert drv.wipes == 0
    assert out.state == fresh(node).state == NodeState.QUARANTINED


@pytest.mark.django_db
def test_a_claim_whose_worker_died_expires_and_a_later_task_takes_over(driver):
    node, _ = agent_node()
    previous = begin(node)

    def killed():
        raise WorkerKilled

    drv = driver(during_wipe=killed)
    with pytest.raises(WorkerKilled):
        cleaning.node_clean(node=node, previous_state=previous)
    with pytest.raises(cleaning.PassTaken):  # the redelivery that comes at once waits for the claim
        cleaning.node_clean(node=node, previous_state=previous)
    assert drv.wipes == 1
    expire_claim(node)
    drv = driver()
    assert cleaning.node_clean(node=node, previous_state=previous).state == NodeState.AVAILABLE
    assert (drv.wipes, fresh(node).clean_claim, fresh(node).clean_claim_until) == (1, None, None)


@pytest.mark.django_db(transaction=True)
def test_a_pass_taken_over_does_not_write_its_outcome(driver):
    """The first pass outlived its claim and a later task took over: the first one's end changes nothing."""
    node, _ = agent_node()
    first_wiping, first_may_end = threading.Event(), threading.Event()
    states_while_second_wipes = []

    def wipe():
        if drv.wipes == 1:
            first_wiping.set()
            first_may_end.wait(10)
            return
        first_may_end.set()
        assert first.result().state == NodeState.CLEANING  # ended, dropping its outcome
        states_while_second_wipes.append(fresh(node).state)

    drv = driver(during_wipe=wipe)
    previous = begin(node)
    first = Aside(lambda: cleaning.node_clean(node=node, previous_state=previous))
    assert first_wiping.wait(10)
    expire_claim(node)
    assert cleaning.node_clean(node=node, previous_state=previous).state == NodeState.AVAILABLE
    assert (drv.wipes, states_while_second_wipes) == (2, [NodeState.CLEANING])


@pytest.mark.django_db
def test_the_task_looks_again_when_the_claim_expires(driver):
    node, _ = agent_node()
    previous = begin(node)
    Node.objects.filter(pk=node.pk).update(clean_claim="00000000-0000-0000-0000-000000000001",
                                           clean_claim_until=db_now() + timedelta(seconds=60))
    drv = driver()
    with mock.patch.object(node_clean_task, "retry", side_effect=Retry()) as retry, pytest.raises(Retry):
        node_clean_task.run(str(node.pk), previous)
    assert drv.wipes == 0
    assert 60 <= retry.call_args.kwargs["countdown"] <= 66
    Node.objects.filter(pk=node.pk).update(clean_claim_until=db_now() + timedelta(hours=5))
    with mock.patch.object(node_clean_task, "retry", side_effect=Retry()) as retry, pytest.raises(Retry):
        node_clean_task.run(str(node.pk), previous)
    assert retry.call_args.kwargs["countdown"] == NODE_CLEAN_RECHECK_MAX_S


@pytest.mark.django_db
def test_a_new_pass_clears_a_claim_left_behind(driver):
    """A pass whose outcome an operator overrode (node back in service) leaves no claim to hold up the next."""
    node, _ = agent_node()
    Node.objects.filter(pk=node.pk).update(clean_claim="00000000-0000-0000-0000-000000000001",
                                           clean_claim_until=db_now() + timedelta(hours=1))
    drv = driver()
    with transaction.atomic():
        cleaning.node_clean_begin(node=fresh(node))
    assert cleaning.node_clean(node=node, previous_state=NodeState.AVAILABLE).state == NodeState.AVAILABLE
    assert drv.wipes == 1
