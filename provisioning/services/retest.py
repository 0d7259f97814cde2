"""The second pass before quarantine (Azure's and GCP's practice): suspect cards are re-tested once on release.

Cards of a group that failed readiness twice (services/quarantine.py), a warm-pool node whose check failed
(services/warm_pool.py), and cards whose health is `degraded` (the agent's health signals, or an operator) when their
instance releases them, are marked degraded in the transaction
that frees them, so nothing is placed on them meanwhile, and a CardRetest row records the failed report. The
`provisioning.card_retest` task then runs the readiness test on just those cards through the node's driver:
passing returns them to the pool (health ok); failing quarantines the node with both reports, which the admin's
card retests page shows the operator.
"""
import logging
from datetime import timedelta

from django.db import transaction
from django.db.models import Q

from core.dbclock import db_now
from core.outbox import outbox_send
from inventory.choices import CardHealth, NodeState
from inventory.lock_objects import node_lock
from inventory.models import Card, Node
from inventory.services import cards_set_health, node_set_state

from ..choices import ReportScope, RetestCause, RetestState
from ..models import CardRetest, Instance, NodeGroup, ReadinessReport
from .readiness_run import cards_test

logger = logging.getLogger("cardmix.provisioning")

# A pass whose worker died is taken over after this long (a test takes minutes at most).
RETEST_CLAIM = timedelta(minutes=15)
# Nodes in these states cannot run a test now (a wipe or a missing agent): the task looks again later.
WAITS_FOR = (NodeState.CLEANING, NodeState.UNREACHABLE)


# How a node held for its second pass is marked; only that mark is lifted by the pass (an operator's stands).
PENDING = "second pass pending:"


class RetestWaits(Exception):
    """The node cannot run the test now; look again later."""


def retest_begin(*, instance: Instance | None, group: NodeGroup | None, cause: str, card_ids, card_indices,
                 first_report: ReadinessReport | None = None, node: Node | None = None) -> CardRetest:
    """Hold released cards out of the pool (degraded) and queue their second pass; inside the releasing transaction.

    A readiness failure may be the node's (an NVSwitch, a PCIe link) rather than its cards': the node takes nothing
    new until the pass ends, as a quarantine did before; a card only reported degraded holds just itself. A card
    already `failed` (its agent said so, or an operator) stays failed: the pass never makes it healthier, only an
    operator does. `instance`/`group` None: a warm-pool node whose check failed (`node` given)."""
    node = group.node if group is not None else node
    held_by = f"instance {instance.pk}" if instance is not None else f"warm pool node {node.hostname}"
    reason = (f"{PENDING} {cause.replace('_', ' ')} on {held_by}"
              + (f" (report #{first_report.pk})" if first_report else ""))
    if cause != RetestCause.DEGRADED and node.state not in (NodeState.QUARANTINED, NodeState.RETIRED):
        node_set_state(node=node, state=NodeState.QUARANTINED, reason=reason)  # the node's lock before its cards'
    held = list(Card.objects.filter(pk__in=list(card_ids)).exclude(health=CardHealth.FAILED)
                .values_list("pk", flat=True))
    cards_set_health(card_ids=held, health=CardHealth.DEGRADED, reason=reason)
    retest = CardRetest.objects.create(node_id=node.pk, instance=instance, group=group, cause=cause,
                                       card_ids=list(card_ids), card_indices=list(card_indices),
                                       first_report=first_report)
    outbox_send("provisioning.card_retest", args=[retest.pk])
    return retest


def retests_for_degraded(*, instance: Instance, groups) -> list[CardRetest]:
    """Second passes for the degraded cards of groups being released (the caller's transaction frees them)."""
    by_id = {cid: g for g in groups for cid in g.card_ids}
    if not by_id:
        return []
    degraded = list(Card.objects.filter(pk__in=list(by_id), health=CardHealth.DEGRADED)
                    .order_by("pk").values_list("pk", "index"))
    retests = []
    for group in {by_id[pk].pk: by_id[pk] for pk, _ in degraded}.values():
        mine = [(pk, index) for pk, index in degraded if by_id[pk].pk == group.pk]
        retests.append(retest_begin(instance=instance, group=group, cause=RetestCause.DEGRADED,
                                    card_ids=[pk for pk, _ in mine], card_indices=[i for _, i in mine]))
    return retests


def _claim(retest_id) -> CardRetest | None:
    """Take a pending pass (or one whose worker died); None when it is done or another worker runs it."""
    now = db_now()
    taken = CardRetest.objects.filter(
        Q(started_at__isnull=True) | Q(started_at__lt=now - RETEST_CLAIM),
        pk=retest_id, state=RetestState.PENDING).update(started_at=now)
    return CardRetest.objects.select_related("instance", "group", "first_report").get(pk=retest_id) if taken else None


def card_retest_run(*, retest_id) -> str:
    """Run one second pass and act on it; returns its state. Raises RetestWaits while the node cannot test."""
    node = Node.objects.select_related("zone", "accelerator").get(
        pk=CardRetest.objects.values_list("node_id", flat=True).get(pk=retest_id))
    if node.state in WAITS_FOR:
        raise RetestWaits(f"{node.hostname} is {node.state}")
    retest = _claim(retest_id)
    if retest is None:
        return CardRetest.objects.values_list("state", flat=True).get(pk=retest_id)
    try:  # no group (a warm-pool node's, or a group deleted since): the report names the node only
        report = cards_test(retest.instance, retest.group, node, retest.card_indices, attempt=1, scope=ReportScope.SECOND_PASS)
    except Exception:  # a driver that crashed is no verdict: let a later pass take the claim over
        CardRetest.objects.filter(pk=retest.pk).update(started_at=None)
        raise
    with transaction.atomic():
        node = node_lock(node.pk)  # the node's lock before its cards'
        if report.passed:
            passed = f"second pass passed (report #{report.pk})"
            if _held_by_pass(node):
                node_set_state(node=node, state=NodeState.AVAILABLE, reason=passed)
            still = list(Card.objects.filter(pk__in=retest.card_ids, health=CardHealth.DEGRADED)
                         .values_list("pk", flat=True))
            cards_set_health(card_ids=still, health=CardHealth.OK, reason=passed)
        else:
            _quarantine(node, retest, report)
        state = RetestState.PASSED if report.passed else RetestState.FAILED
        CardRetest.objects.filter(pk=retest.pk).update(state=state, second_report=report, finished_at=db_now())
    logger.info("second pass", extra={"node_id": str(node.pk), "cards": retest.card_indices, "cause": retest.cause,
                                      "passed": report.passed, "report": report.pk})
    return state


def _evidence(label: str, report: ReadinessReport | None) -> str:
    if report is None:
        return f"{label}: health reported degraded"
    return f"{label} (report #{report.pk}): " + ("; ".join(str(e) for e in report.errors[:3]) or "failed")


def _held_by_pass(node: Node) -> bool:
    node.refresh_from_db(fields=["state", "state_reason"])
    return node.state == NodeState.QUARANTINED and node.state_reason.startswith(PENDING)


def _quarantine(node: Node, retest: CardRetest, report: ReadinessReport) -> None:
    """Quarantine the node with both reports (an operator's quarantine or retirement stays as it is)."""
    if node.state == NodeState.RETIRED or (node.state == NodeState.QUARANTINED and not _held_by_pass(node)):
        return
    after = f"instance {retest.instance_id}" if retest.instance_id else "the warm pool's check"
    why = (f"second pass failed on cards {retest.card_indices} after {after} — "
           f"{_evidence('first', retest.first_report)} — {_evidence('second', report)}")
    node_set_state(node=node, state=NodeState.QUARANTINED, reason=why[:500])
