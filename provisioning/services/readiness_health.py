"""A card that its agent reports failed while its instance is being provisioned or checked (SPEC §10).

The health listener (services/health.py) acts only on running instances: before hand-over there is no charge to stop
and nobody to move. What the customer should see instead is that readiness failed, as it would if the test itself had
caught the card: the worker (steps.py) looks at its groups' cards before each readiness attempt, after a passing one,
and once more under the instance's lock as it goes running. A failed card fails its group's check at once (no retry:
the agent's word is definitive) with a report naming the card and the signal, in the customer's readiness list; the
group then goes the way of every readiness failure (services/quarantine.py): its cards to the second pass, where the
failed card stays failed (services/retest.py), and the group placed again while the SLA window is open.

While an instance is stopping its meters have closed with running, so a signal then has nothing to credit: the card
is failed (never placed again until an operator marks it healthy) and the stop goes on.
"""
from core.dbclock import db_now
from hardware.selectors import card_signal_first
from inventory.choices import CardHealth
from inventory.models import Card

from ..choices import ReportScope
from ..models import NodeGroup, ReadinessReport


class CardsFailed(Exception):
    """Raised under the instance's lock as it would go running: a held card failed meanwhile (rolls the move back)."""

    def __init__(self, group: NodeGroup):
        super().__init__(f"a card of group {group.pk} failed")
        self.group = group


def cards_failed(group: NodeGroup) -> list[tuple[int, str]]:
    """(card index, what its agent said) for each of the group's cards whose health is failed."""
    failed = list(Card.objects.filter(pk__in=list(group.card_ids), health=CardHealth.FAILED)
                  .order_by("index").values_list("pk", "index"))
    details = []
    for pk, index in failed:
        signal = card_signal_first(card_id=pk, klass=CardHealth.FAILED, since=group.created_at)
        details.append((index, signal.detail if signal is not None else "marked failed"))
    return details


def groups_with_failed_cards(groups) -> list[NodeGroup]:
    """The groups holding a card whose health is failed (one query for all of them)."""
    failed = set(Card.objects.filter(pk__in=[c for g in groups for c in g.card_ids], health=CardHealth.FAILED)
                 .values_list("pk", flat=True))
    return [g for g in groups if failed & set(g.card_ids)]


def health_failure_report(instance, group: NodeGroup, failed: list[tuple[int, str]]) -> ReadinessReport:
    """The readiness report of a check failed by its cards' health (the customer's readiness list shows it)."""
    now = db_now()
    return ReadinessReport.objects.create(
        instance=instance, group=group, node=group.node, nodes=[group.node.hostname], scope=ReportScope.HEALTH,
        tool="agent health", command="health probe (heartbeat)", attempt=max(group.check_attempts, 1),
        cards=[i for i, _ in failed], errors=[f"card {i} reported failed: {d}"[:300] for i, d in failed],
        passed=False, exit_code=None, started_at=now, finished_at=now)


def health_failure_reason(group: NodeGroup, failed: list[tuple[int, str]]) -> str:
    cards = ", ".join(f"card {i} ({d})" for i, d in failed)
    return f"{group.node.hostname}: {cards} failed during readiness"[:300]
