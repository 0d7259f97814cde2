"""Health while running (SPEC §10): what a card's degraded or failed signal (hardware/card_health.py, heard
through hardware's card health listeners) does to the running instance holding it.

- degraded: an incident opens (one per instance and card), the instance page warns its users, the item's meter is
  flagged (charged, and the statement says so); the card itself is not placed again (its health).
- failed: the same incident becomes failed at the signal's second: the item's meter closes then and its other
  cards go on in a new meter, so the failed card costs nothing from that second (what ticks had charged past it
  is given back as compensation, key `health:<incident>:<meter>`, once); its creator is emailed at once, the
  organization's webhooks get `instance.card_failed`, and a container can be moved to healthy cards
  (health_move.py).
- the instance leaving running (stopped, moved, failed, terminated) ends its incidents: `uncharged` records what
  the failed card's time would have cost (the page and the statement show it).
Each decision is taken under the instance's row lock, as a stop takes it, so an incident never opens on an instance
that has just left running.
"""
import logging

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext

from core.dbclock import db_now
from core.failpoints import failpoint
from core.mail import send_to_people
from inventory.choices import HolderKind
from inventory.models import CardAllocation
from tenancy.audit import audit_record

from ..choices import InstanceKind
from ..choices import InstanceState as S
from ..lock_objects import instance_lock
from ..models import HealthIncident, NodeGroup
from . import billing_port, webhooks_port

logger = logging.getLogger("cardmix.provisioning")
Klass = HealthIncident.Klass


def card_health_heard(*, node_id, signals) -> None:
    """hardware's card health listener: each held card's worst new signal, acted on for its instance. If it fails
    (hardware logs it and goes on), the beat sweep (health_sweep.py) does what it left undone."""
    failpoint("health:listener")
    cards = {s.card_id for s in signals if s.card_id}
    holders = dict(CardAllocation.objects.live().filter(card_id__in=cards, holder_kind=HolderKind.INSTANCE)
                   .values_list("card_id", "holder_id"))
    for card_id in sorted(holders):
        mine = [s for s in signals if s.card_id == card_id]
        signal = next((s for s in mine if s.klass == Klass.FAILED), mine[0])
        health_incident_record(instance_id=holders[card_id], card_id=card_id, klass=signal.klass,
                               detail=signal.detail, at=signal.seen_at)


def _card_label(group: NodeGroup, card_id) -> str:
    index = group.card_indices[group.card_ids.index(card_id)]
    return f"{group.node.hostname} card {index}"


def health_incident_record(*, instance_id, card_id, klass: str, detail: str, at) -> HealthIncident | None:
    """Open (or escalate to failed) the incident of a running instance's card; None when the instance is not
    running or no longer holds the card. A repeated report changes nothing."""
    with transaction.atomic():
        instance = instance_lock(instance_id=instance_id)
        if instance.state != S.RUNNING:
            return None
        group = next((g for g in NodeGroup.objects.live().filter(instance=instance).select_related("node")
                      if card_id in g.card_ids), None)
        if group is None:
            return None
        incident = (HealthIncident.objects.select_for_update()
                    .filter(instance=instance, card_id=card_id, ended_at__isnull=True).first())
        if incident is not None and (incident.failed_at is not None or klass != Klass.FAILED):
            return incident
        label = _card_label(group, card_id)
        if incident is None:
            rate = 0 if instance.billing == "monthly" else int(instance.items[group.item_index]["rate"])
            incident = HealthIncident.objects.create(instance=instance, card_id=card_id, item_index=group.item_index,
                                                     klass=klass, detail=detail[:300], started_at=at, rate=rate)
        if klass == Klass.DEGRADED:
            billing_port.meter_flag(instance_id=instance.pk, item_index=group.item_index,
                                    flag=f"{label} degraded from {at:%Y-%m-%d %H:%M:%S} UTC (charged): {detail}")
            audit_record(action="instance.card_degraded", org=instance.organization, target=instance,
                         details={"incident": str(incident.pk), "card": label, "detail": detail[:300]})
            return incident
        _failed(instance, incident, label=label, detail=detail, at=at)
    return incident


def _failed(instance, incident: HealthIncident, *, label: str, detail: str, at) -> None:
    incident.klass, incident.failed_at, incident.detail = Klass.FAILED, at, detail[:300]
    dropped = billing_port.meter_cards_drop(
        instance_id=instance.pk, item_index=incident.item_index, cards=1, at=at, key=f"health:{incident.pk}",
        flag=f"{label} failed at {at:%Y-%m-%d %H:%M:%S} UTC: not charged from then ({detail})")
    incident.credited = dropped["credited"]
    incident.emailed_at = db_now() if _email(instance, incident) else None
    incident.save(update_fields=["klass", "failed_at", "detail", "credited", "emailed_at"])
    webhooks_port.card_failed_publish(instance=instance, incident=incident, card=label)
    audit_record(action="instance.card_failed", org=instance.organization, target=instance,
                 details={"incident": str(incident.pk), "card": label, "detail": detail[:300],
                          "failed_at": at.isoformat(), "credited": incident.credited})
    logger.warning("card failed under a running instance", extra={"instance": str(instance.pk), "card": label})


def health_incidents_end(*, instance, at, outcome: str) -> int:
    """The instance leaves running at `at` (its meters close with it): its open incidents end; a failed card's
    time from its failure is valued (`uncharged`). Callers hold the instance's lock. → how many ended."""
    ended = 0
    for incident in HealthIncident.objects.select_for_update().filter(instance=instance, ended_at__isnull=True):
        incident.ended_at, incident.outcome = at, outcome
        if incident.failed_at is not None and incident.rate:
            incident.uncharged = billing_port.card_time_value(rate=incident.rate, start=incident.failed_at, end=at)
        incident.save(update_fields=["ended_at", "outcome", "uncharged"])
        ended += 1
    return ended


def _email(instance, incident: HealthIncident) -> bool:
    """Tell the instance's creator once, in their language, after commit; False when there is nobody to tell."""
    creator = instance.creator if instance.creator_id else None
    if not getattr(creator, "email", ""):
        return False
    card = incident.card
    failed_at = f"{incident.failed_at:%Y-%m-%d %H:%M:%S} UTC"

    def render():
        label = gettext("%(node)s card %(index)s") % {"node": card.node.hostname, "index": card.index}
        paid = (gettext("Its monthly package period runs on.") if instance.billing == "monthly"
                else gettext("You are not charged for that card from then on."))
        move = (gettext("You can move the instance to healthy cards from its page; its volumes are kept.")
                if instance.kind == InstanceKind.CONTAINER else gettext("Stop the instance to release the card."))
        return (gettext("Cardmix: a card of instance %(name)s failed") % {"name": instance.name},
                gettext("%(card)s under your instance %(name)s failed at %(failed_at)s: %(detail)s\n\n%(paid)s "
                        "%(move)s\n\n%(url)s") % {
                    "card": label, "name": instance.name, "failed_at": failed_at, "detail": incident.detail,
                    "paid": paid, "move": move, "url": f"{settings.SITE_URL}/instances/{instance.pk}/"})

    return bool(send_to_people([creator], render))

