"""Writes: the health an agent reports with its heartbeat (`health_probe`), parsed and classified by
hardware/health, kept as CardSignal rows once each, and acted on: a card gets the worst class of its new signals
(cards are never made healthier here; an operator marks them healthy, audited) and the registered listeners
(provisioning: its instance's user is told, its billing adjusted) hear of every new signal."""
import logging

from django.db import transaction

from inventory.choices import CardHealth
from inventory.models import Card
from inventory.services import cards_set_health

from .health import DEGRADED, FAILED, INFO, UNPARSED, parse_probe, worst
from .health.classes import rank
from .health.parsers import card_buses
from .hooks import card_health_reported
from .models import CardSignal

logger = logging.getLogger("cardmix.hardware")


def heartbeat_health_record(*, node, signals, at) -> list[CardSignal]:
    """Store the new degraded/failed signals of a heartbeat (`health_signals` parsed its probe), raise their cards'
    health, tell the listeners; → the new rows. `at`: the heartbeat's time (DB clock), the signals' `seen_at`.

    Info signals and output that could not be parsed are logged; the node's report (credential facts) keeps all of
    them (`health_summary`), so an unparsed output shows as such, never as healthy."""
    for signal in signals:
        if signal.klass == UNPARSED:
            logger.warning("unparsed health output from %s: %s", node.hostname, signal.detail)
        elif signal.klass == INFO:
            logger.info("health info from %s card %s: %s", node.hostname, signal.card, signal.detail)
    kept = [s for s in signals if s.klass in (DEGRADED, FAILED)]
    if not kept:
        return []
    with transaction.atomic():
        cards = {c.index: c for c in Card.objects.filter(node=node)}
        seen = set(CardSignal.objects.filter(node=node, fingerprint__in=[s.fingerprint for s in kept])
                   .values_list("fingerprint", flat=True))
        rows, fresh = [], set()
        for s in kept:
            if s.fingerprint in seen or s.fingerprint in fresh:
                continue
            fresh.add(s.fingerprint)
            rows.append(CardSignal(node=node, card=cards.get(s.card), kind=s.kind, code=s.code, klass=s.klass,
                                   detail=s.detail[:300], fingerprint=s.fingerprint, seen_at=at))
        if not rows:
            return []
        # A concurrent heartbeat of the same node that stored one first wins (its listeners act on it).
        CardSignal.objects.bulk_create(rows, ignore_conflicts=True)
        rows = list(CardSignal.objects.filter(node=node, fingerprint__in=fresh, seen_at=at).select_related("card"))
        # Each card takes the worst class among its new signals, never a milder one than it has.
        for card_id in sorted({r.card_id for r in rows if r.card_id}):
            mine = [r for r in rows if r.card_id == card_id]
            klass = worst(r.klass for r in mine)
            if rank(klass) > rank(mine[0].card.health):
                details = "; ".join(sorted({r.detail for r in mine if r.klass == klass}))
                cards_set_health(card_ids=[card_id], health=CardHealth(klass),
                                 reason=f"reported by the node's agent: {details}"[:500])
        for row in rows:
            logger.warning("health %s from %s card %s: %s", row.klass, node.hostname,
                           row.card.index if row.card else None, row.detail)
    card_health_reported(node_id=node.pk, signals=rows)
    return rows


def health_signals(report: dict, known_buses: dict) -> tuple[list, dict]:
    """(the signals of a heartbeat's probe, {bus id: card index} to remember for the next ones); no signals from an
    agent before 1.6.0 (it sends no probe)."""
    probe = report.get("health_probe")
    if not probe:
        return [], known_buses
    return parse_probe(probe, known_buses), {**known_buses, **card_buses(probe)}


def health_summary(signals) -> list[dict]:
    """Signals as plain rows: the node's report shows them to operators (unparsed ones included)."""
    return [{"card": s.card, "kind": s.kind, "code": s.code, "class": s.klass, "detail": s.detail} for s in signals]
