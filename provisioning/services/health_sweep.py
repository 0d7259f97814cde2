"""The beat sweep behind the card health listener (services/health.py): what a failed listener left undone is done.

hardware keeps each degraded/failed signal (CardSignal) and raises the card's health in its own transaction, then
calls the listeners; one that raises is logged and the heartbeat goes on, so an incident could be missing for good.
Every HEALTH_SWEEP_SECONDS this sweep finds:
- a running instance holding a card whose health is failed (or degraded) with no open incident of that class: the
  incident is recorded as the listener would have, from the card's first such signal since the instance went
  running (its `seen_at`, so the failed card is not charged from that very second, exact to the µCNY; ticks that
  ran past it are given back, key `health:<incident>:<meter>`, once);
- an open failed incident whose item's open meter began before the failure second (its billing split did not
  happen): the split is done at that second, with the same key.
A card marked failed by an operator, with no agent signal, opens nothing (as before: the listener hears agents).
Each step runs under the instance's lock (health_incident_record), so running it twice, or beside the listener,
changes nothing the second time.
"""
import logging

from django.db import transaction

from hardware.selectors import card_signal_first
from inventory.choices import CardHealth, HolderKind
from inventory.models import CardAllocation

from ..choices import InstanceState as S
from ..lock_objects import instance_lock
from ..models import HealthIncident, Instance, NodeGroup
from . import billing_port
from .health import _card_label, health_incident_record

logger = logging.getLogger("cardmix.provisioning")
Klass = HealthIncident.Klass


def health_incidents_sweep() -> dict[str, int]:
    """One pass; → {"recorded": incidents opened or escalated, "split": billing splits done}."""
    return {"recorded": _missing_incidents(), "split": _missing_splits()}


def _missing_incidents() -> int:
    # From the few unhealthy held cards to their running instances, in one statement (the scale goals,
    # SPEC §13: not the fleet's running instances through Python, 1.7 s at 100k).
    running_ids = Instance.objects.filter(state=S.RUNNING, ready_at__isnull=False).values("pk")
    held = list(CardAllocation.objects.live().filter(
        holder_kind=HolderKind.INSTANCE, holder_id__in=running_ids,
        card__health__in=[CardHealth.FAILED, CardHealth.DEGRADED]).values_list("card_id", "holder_id", "card__health"))
    if not held:
        return 0
    running = dict(Instance.objects.filter(pk__in={h for _, h, _ in held}, state=S.RUNNING, ready_at__isnull=False)
                   .values_list("pk", "ready_at"))
    incidents = {(i.instance_id, i.card_id): i for i in HealthIncident.objects.filter(
        ended_at__isnull=True, instance_id__in={h for _, h, _ in held})}
    recorded = 0
    for card_id, instance_id, health in held:
        if instance_id not in running:
            continue  # it left running between the two reads
        incident = incidents.get((instance_id, card_id))
        if incident is not None and (incident.failed_at is not None or health != CardHealth.FAILED):
            continue  # what the card's health says is recorded already
        signal = card_signal_first(card_id=card_id, klass=health, since=running[instance_id])
        if signal is None:
            continue  # an operator's mark, or a signal from before this run: not the listener's to act on
        if health_incident_record(instance_id=instance_id, card_id=card_id, klass=health, detail=signal.detail,
                                  at=signal.seen_at) is not None:
            recorded += 1
            logger.warning("health sweep recorded a missed incident", extra={
                "instance": str(instance_id), "card": str(card_id), "klass": health, "signal": signal.pk})
    return recorded


def _missing_splits() -> int:
    split = 0
    for pk in HealthIncident.objects.filter(ended_at__isnull=True, failed_at__isnull=False, rate__gt=0,
                                            instance__state=S.RUNNING).values_list("pk", flat=True):
        split += health_incident_split(incident_id=pk)
    return split


def health_incident_split(*, incident_id) -> bool:
    """Do a failed incident's billing split if its item's open meter began before the failure second (each split opens
    the rest's meter at its failure second, so one done leaves none older); → whether it was missing."""
    with transaction.atomic():
        incident = HealthIncident.objects.select_related("instance").get(pk=incident_id)
        instance = instance_lock(instance_id=incident.instance_id)
        incident = HealthIncident.objects.select_for_update().get(pk=incident_id)
        if instance.state != S.RUNNING or incident.ended_at is not None or incident.failed_at is None:
            return False
        meter = billing_port.item_meter_open(instance_id=instance.pk, item_index=incident.item_index)
        if meter is None or meter.opened_at >= incident.failed_at:
            return False
        group = next((g for g in NodeGroup.objects.live().filter(instance=instance).select_related("node")
                      if incident.card_id in g.card_ids), None)
        label = _card_label(group, incident.card_id) if group is not None else f"card {incident.card_id}"
        dropped = billing_port.meter_cards_drop(
            instance_id=instance.pk, item_index=incident.item_index, cards=1, at=incident.failed_at,
            key=f"health:{incident.pk}",
            flag=f"{label} failed at {incident.failed_at:%Y-%m-%d %H:%M:%S} UTC: not charged from then "
                 f"({incident.detail})")
        incident.credited += dropped["credited"]
        incident.save(update_fields=["credited"])
    logger.warning("health sweep did a missed billing split", extra={"incident": str(incident_id),
                                                                    "credited": dropped["credited"]})
    return True
