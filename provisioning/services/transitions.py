"""The one place an instance changes state: checks the table and records the event."""
from django.db import transaction
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import InvalidState
from core.request_context import request_id_var

from ..choices import InstanceState, can_transition
from ..lock_objects import instance_lock
from ..models import Instance, InstanceEvent
from . import billing_port, storage_port, webhooks_port
from .expiry import transition_defaults
from .health import health_incidents_end


def event_record(*, instance: Instance, from_state: str, to_state: str, reason: str = "", actor=None,
                 at=None) -> InstanceEvent:
    """Append one event row (used for the creation event and by instance_transition)."""
    return InstanceEvent.objects.create(
        instance=instance, from_state=from_state, to_state=to_state, reason=reason[:300],
        request_id=request_id_var.get(), actor=actor, created_at=at or db_now(),
    )


def instance_transition(*, instance: Instance, to: str, reason: str = "", actor=None, now=None,
                        **fields) -> InstanceEvent:
    """Move a LOCKED instance to `to` if the table allows it; save `fields` with it; record the event. `now`: the
    database clock the caller read in this transaction (one round trip less).

    Callers lock the row first (lock_objects.instance_lock) inside their transaction, so the check
    and the write cannot interleave with another process. Illegal → InvalidState (409).
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("instance_transition must run inside transaction.atomic")
    current = instance.state
    if not can_transition(current, to):
        raise InvalidState(
            # str(): the values ('stopping'), not the enum members' reprs.
            gettext("An instance in state '%(str)s' cannot become '%(str2)s'.") % {'str': str(current), 'str2': str(to)},
            details={"state": [str(current)], "requested": [str(to)]},
        )
    now = now or db_now()
    if current == InstanceState.RUNNING and to != InstanceState.RUNNING:
        # Billing stops the second the instance leaves running, in the same transaction.
        billing_port.meters_close(instance_id=instance.pk, at=now, now=now)
        health_incidents_end(instance=instance, at=now, outcome=str(to))  # a failed card's time ends with it
    if to == InstanceState.TERMINATED:
        # Volumes outlive the instance: detached (kept, still billed), datasets unmounted, in the same transaction.
        storage_port.storage_released(instance=instance, actor=actor)
    fields = {**transition_defaults(to, now), **fields}  # expiry of waiting states, reconciler retries
    instance.state = to
    instance.state_reason = reason[:300]
    for name, value in fields.items():
        setattr(instance, name, value)
    instance.save(update_fields=["state", "state_reason", "updated_at", *fields])
    event = event_record(instance=instance, from_state=current, to_state=to, reason=reason, actor=actor, at=now)
    webhooks_port.instance_state_publish(instance=instance, event=event)
    return event


def instance_transition_by_id(*, instance_id, to: str, reason: str = "", actor=None, **fields) -> Instance:
    """Lock, transition and return the instance in its own transaction."""
    with transaction.atomic():
        instance = instance_lock(instance_id=instance_id)
        instance_transition(instance=instance, to=to, reason=reason, actor=actor, **fields)
        return instance
