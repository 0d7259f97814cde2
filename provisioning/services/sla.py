"""The provisioning SLA (SPEC §3): running within SLA_SECONDS of the create/start request — or of the
wake-up for a waitlisted instance — else a compensation credit, exactly once per breach id.

The deadline and the breach id (`sla_event_id`, the id of that request event) live on the instance
row. Once the outcome of a window is known (running, failed, or terminated) the window is settled:
`sla_settled_event_id` records which breach id was settled and `sla_compensation` what was granted,
in the same transaction as the ledger's `compensation_grant` (itself idempotent per `sla:<breach id>`).
"""
import logging
from datetime import timedelta

from django.db import transaction
from django.db.models import F, Q

from billing.services import compensation_grant
from core.money import format_ucny
from core.outbox import outbox_send
from tenancy.audit import audit_record

from ..choices import FUNDS_FAILURE
from ..choices import InstanceState as S
from ..lock_objects import instance_lock
from ..models import Instance, InstanceEvent
from . import webhooks_port

logger = logging.getLogger("cardmix.provisioning")

HOUR = timedelta(hours=1)
# States on the way to running: the window's outcome is not known yet.
IN_FLIGHT = (S.PENDING, S.PROVISIONING, S.CHECKING, S.STARTING)


def sla_hours(lateness: timedelta) -> int:
    """Hours of compensation: ceil(lateness / 1 h), at least one (1 s → 1; 60 min → 1; 60 min 1 s → 2)."""
    micros = lateness // timedelta(microseconds=1)
    return max(1, -(-micros // (HOUR // timedelta(microseconds=1))))


def sla_rate(instance: Instance) -> int:
    """Σ(rate × cards) in µCNY per hour at the instance's locked rates."""
    if instance.items:
        return sum(int(it["rate"]) * int(it["count"]) for it in instance.items)
    return int(instance.price_per_hour)


def sla_granted(instance: Instance) -> int:
    """µCNY granted for the instance's current breach id (0: none, or not settled yet)."""
    if instance.sla_event_id is not None and instance.sla_settled_event_id == instance.sla_event_id:
        return int(instance.sla_compensation)
    return 0


def sla_outcome(instance: Instance) -> tuple[str | None, object]:
    """How the current window ended: ("running", ready_at), ("failed" | "terminating", event time) or (None, None).

    A failure for the organization's funds (ready, but the monthly package could not be charged) counts as
    "terminating": the customer's side ended the window, so only lateness past the deadline is owed."""
    opened = (InstanceEvent.objects.filter(pk=instance.sla_event_id).values_list("created_at", flat=True).first()
              if instance.sla_event_id else None)
    if instance.ready_at is not None and (opened is None or instance.ready_at >= opened):
        return S.RUNNING, instance.ready_at
    ends = InstanceEvent.objects.filter(instance=instance, to_state__in=[S.FAILED, S.TERMINATING])
    if opened is not None:
        ends = ends.filter(created_at__gte=opened)
    end = ends.order_by("created_at", "id").values_list("to_state", "created_at", "reason").first()
    if not end:
        return None, None
    to_state, at, reason = end
    if to_state == S.FAILED and reason.startswith(f"{FUNDS_FAILURE}:"):
        return S.TERMINATING, at
    return to_state, at


def sla_compensation_due(instance: Instance) -> int:
    """µCNY owed for the current window per SPEC §3 (0: no breach, e.g. terminated before the deadline)."""
    deadline = instance.sla_deadline
    outcome, at = sla_outcome(instance)
    if deadline is None or outcome is None:
        return 0
    if outcome == S.FAILED:  # as late as the failure time, at least one hour
        return sla_rate(instance) * sla_hours(at - deadline)
    if at > deadline:  # running late, or given up on by the customer after the deadline
        return sla_rate(instance) * sla_hours(at - deadline)
    return 0


def sla_settle(*, instance_id) -> int | None:
    """Settle the instance's current window once its outcome is known; grant the compensation once.

    Returns the µCNY granted (0: no breach), or None when there is nothing to settle (yet).
    """
    with transaction.atomic():
        instance = instance_lock(instance_id=instance_id)
        if (instance.sla_event_id is None or instance.sla_deadline is None
                or instance.sla_settled_event_id == instance.sla_event_id or instance.state in IN_FLIGHT):
            return None
        amount = sla_compensation_due(instance)
        if amount > 0:
            compensation_grant(org=instance.organization, breach_id=str(instance.sla_event_id), amount=amount)
            audit_record(action="instance.sla_breach", org=instance.organization, target=instance,
                         details={"breach_id": str(instance.sla_event_id), "amount": amount,
                                  "deadline": instance.sla_deadline.isoformat(), "state": instance.state})
            webhooks_port.sla_breach_publish(instance=instance, breach_id=instance.sla_event_id,
                                             amount_text=format_ucny(amount))
        instance.sla_settled_event_id, instance.sla_compensation = instance.sla_event_id, amount
        instance.save(update_fields=["sla_settled_event_id", "sla_compensation", "updated_at"])
    if amount:
        logger.info("SLA breach compensated", extra={"instance": str(instance_id), "amount": amount})
    return amount


def sla_unsettled():
    """Instances whose current window has an outcome but was not settled yet."""
    return (Instance.objects.filter(sla_event_id__isnull=False, sla_deadline__isnull=False)
            .exclude(state__in=IN_FLIGHT)
            .filter(Q(sla_settled_event_id__isnull=True) | ~Q(sla_settled_event_id=F("sla_event_id"))))


def sla_settle_due(*, limit: int = 1000) -> int:
    """Settle every window whose outcome is known (beat); returns how many breaches were compensated."""
    ids = list(sla_unsettled().order_by("sla_deadline").values_list("pk", flat=True)[:limit])
    return sum(1 for pk in ids if sla_settle(instance_id=pk))


def sla_dispatch(instance_id) -> None:
    """Settle this instance's window in the worker once the current transaction commits (outbox: a
    broker outage delays the settlement, never loses it)."""
    outbox_send("provisioning.sla_settle", args=[str(instance_id)])
