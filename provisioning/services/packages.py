"""Monthly packages seen from the instance: the customer's renewal choice, and a period's end (billing's
package-end hook), after which the instance goes on demand, or stops.

"renewed" changes nothing. Otherwise the instance is billed on demand from then on, at today's on-demand
rates: if it is running and the choice was "on_demand", its meters open at the period's end second (no
unbilled gap while the beat caught up); if the choice was "stop" (or renewing found no funds), it stops —
the seconds between the period's end and the stop are the platform's latency and are not charged. A
stopped instance started later is on demand (a new package is a new instance's choice).
"""
from django.db import transaction
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import InvalidState, NotFoundError, ValidationFailed
from tenancy.audit import audit_record

from ..choices import InstanceState as S
from ..lock_objects import instance_lock
from ..models import PackageRenewal
from . import billing_port
from .capacity import current_rates
from .instances import instance_dispatch, step_deadline
from .transitions import event_record, instance_transition


def instance_package_ended(*, instance_id, outcome: str, at=None):
    """Apply a package period's end to its instance (idempotent: a second call finds it on demand)."""
    if outcome == "renewed":
        return None
    with transaction.atomic():
        try:
            instance = instance_lock(instance_id=instance_id)
        except NotFoundError:
            return None
        if instance.billing != "monthly" or instance.state in (S.TERMINATING, S.TERMINATED):
            return instance
        rates = current_rates(billing="on_demand")
        items = [{**it, "rate": rates.get(it["accelerator"], it["rate"])} for it in instance.items]
        instance.billing, instance.items = "on_demand", items
        instance.price_per_hour = sum(int(it["rate"]) * int(it["count"]) for it in items)
        instance.save(update_fields=["billing", "items", "price_per_hour", "updated_at"])
        reason = f"monthly package ended (renewal: {outcome})"
        audit_record(action="instance.package_ended", org=instance.organization, target=instance,
                     details={"outcome": outcome, "at": str(at) if at else None,
                              "price_per_hour": instance.price_per_hour})
        if instance.state != S.RUNNING:
            return instance
        if outcome == "on_demand":
            billing_port.meters_open(instance=instance, at=at)
            event_record(instance=instance, from_state=S.RUNNING, to_state=S.RUNNING,
                         reason=f"{reason}: billed on demand")
        else:
            instance_transition(instance=instance, to=S.STOPPING, reason=reason,
                                step_deadline=step_deadline(instance, db_now()))
            instance_dispatch(instance.pk)
    return instance


def instance_package_renewal_set(*, org, instance_id, renewal: str, actor=None, request=None):
    """Change what happens when the monthly package period ends: "renew", "on_demand" or "stop"."""
    if renewal not in PackageRenewal.values:
        raise ValidationFailed(gettext("Unknown renewal choice."),
                               details={"package_renewal": [gettext('One of: %(join)s.') % {'join': ', '.join(PackageRenewal.values)}]})
    with transaction.atomic():
        instance = instance_lock(instance_id=instance_id, org=org)
        if instance.billing != "monthly" or instance.state in (S.TERMINATING, S.TERMINATED):
            raise InvalidState(gettext("Only a monthly instance that is not terminated has a renewal choice."),
                               details={"billing": [instance.billing], "state": [instance.state]})
        if instance.package_renewal != renewal:
            audit_record(action="instance.package_renewal", org=org, actor=actor, target=instance, request=request,
                         details={"old": instance.package_renewal, "new": renewal})
            instance.package_renewal = renewal
            instance.save(update_fields=["package_renewal", "updated_at"])
        billing_port.package_renewal_set(instance=instance, renewal=renewal, actor=actor, request=request)
    return instance
