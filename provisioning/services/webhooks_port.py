"""The one place provisioning publishes customer webhooks (webhooks.services.event_publish)."""
from webhooks.services import event_publish

from ..choices import InstanceState as S

# Instance states a customer is told about when an instance enters them.
STATE_EVENTS = {S.RUNNING: "instance.running", S.FAILED: "instance.failed", S.STOPPED: "instance.stopped",
                S.TERMINATED: "instance.terminated"}


def _instance_data(instance, **extra) -> dict:
    return {"instance": {"id": str(instance.pk), "name": instance.name, "kind": instance.kind,
                         "state": str(instance.state), "reason": instance.state_reason}, **extra}


def instance_state_publish(*, instance, event) -> None:
    """After a transition (same transaction): the event type for its new state, once per InstanceEvent."""
    type = STATE_EVENTS.get(event.to_state)
    if type:
        event_publish(org_id=instance.organization_id, type=type, dedupe_key=f"event:{event.pk}",
                      data=_instance_data(instance, at=event.created_at.isoformat()))


def sla_breach_publish(*, instance, breach_id, amount_text: str) -> None:
    event_publish(org_id=instance.organization_id, type="instance.sla_breached", dedupe_key=f"breach:{breach_id}",
                  data=_instance_data(instance, deadline=instance.sla_deadline.isoformat(),
                                      compensation=amount_text))


def waitlist_woken_publish(*, instance, event) -> None:
    event_publish(org_id=instance.organization_id, type="waitlist.woken", dedupe_key=f"event:{event.pk}",
                  data=_instance_data(instance))


def card_failed_publish(*, instance, incident, card: str) -> None:
    """A card under a running instance failed (services/health.py): once per incident."""
    event_publish(org_id=instance.organization_id, type="instance.card_failed", dedupe_key=f"health:{incident.pk}",
                  data=_instance_data(instance, card=card, detail=incident.detail,
                                      failed_at=incident.failed_at.isoformat()))
