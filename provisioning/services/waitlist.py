"""Waking waitlisted instances when capacity frees (first come, first served per shape)."""
import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from core.dbclock import db_now
from core.errors import ServiceError
from core.locks import advisory_lock_held
from tenancy.lock_objects import organization_lock

from ..choices import InstanceState as S
from ..lock_objects import instance_lock
from ..models import Instance
from ..placement import place
from ..selectors import waitlist_shape
from . import billing_port, webhooks_port
from .capacity import free_snapshot, placement_catalog
from .claims import placement_claim
from .instances import _quota_check, instance_dispatch, placement_spec_again, step_deadline
from .specs import images_resolve
from .transitions import instance_transition

logger = logging.getLogger("cardmix.provisioning")


# What one wake attempt came to: only NO_CAPACITY says anything about the rest of the shape's queue.
WOKEN, NO_CAPACITY, SKIPPED = "woken", "no_capacity", "skipped"


def _locked_items(instance: Instance, placed, catalog) -> list[dict]:
    """The placed mix with its rates (µCNY per card-hour).

    Explicit items keep the rates stored when the create/start request was accepted — what the quote
    and the 202 body showed (SPEC §3: rates are locked at the request). A policy instance's mix is
    chosen only now, so it takes the rates in force at the wake.
    """
    stored = {} if instance.policy else {it["accelerator"]: int(it["rate"]) for it in instance.items}
    return [{"accelerator": it.accelerator, "count": it.count,
             "rate": stored.get(it.accelerator, catalog[it.accelerator].price_per_card_hour)} for it in placed]


def _wake_one(instance_id) -> str:
    """Place one waitlisted instance if it fits now: WOKEN (now provisioning), NO_CAPACITY, or SKIPPED
    (gone from the queue, or this organization's quota or funds do not allow it now)."""
    org_id = Instance.objects.filter(pk=instance_id).values_list("organization_id", flat=True).first()
    if org_id is None:
        return SKIPPED
    with transaction.atomic():
        org = organization_lock(org_id)  # before the instance, as a start locks them
        instance = instance_lock(instance_id=instance_id)
        if instance.state != S.WAITLISTED:
            return SKIPPED
        catalog = placement_catalog(billing=instance.billing)
        spec = placement_spec_again(instance, catalog)
        cards = instance.card_total or (instance.policy or {}).get("total_cards", 0)
        try:
            _quota_check(org, cards)
            with transaction.atomic():
                result = placement_claim(instance=instance, request=spec.placement_request(), catalog=catalog)
                if not result.ok:
                    return NO_CAPACITY
                items = _locked_items(instance, result.items, catalog)
                price = sum(it["rate"] * it["count"] for it in items)
                billing_port.funds_check(org=org, price_per_hour=price, billing=instance.billing)
                now = db_now()
                event = instance_transition(
                    instance=instance, to=S.PROVISIONING, reason="woken: capacity freed", items=items,
                    images=images_resolve(spec, result.items, catalog, org=instance.organization_id), price_per_hour=price,
                    sla_deadline=now + timedelta(seconds=settings.SLA_SECONDS), step_deadline=step_deadline(instance, now))
                instance.sla_event_id = event.pk
                instance.save(update_fields=["sla_event_id"])
                webhooks_port.waitlist_woken_publish(instance=instance, event=event)
        except ServiceError as exc:  # over quota or out of funds now: stays in the queue, in its place
            logger.info("waitlisted instance not woken", extra={"instance": str(instance_id), "why": exc.code})
            return SKIPPED
        instance_dispatch(instance.pk)
        return WOKEN


def _fits(instance: Instance, fleet, catalogs: dict) -> bool:
    """Whether the instance's request places on the pass's snapshot (the nodes placement_decide would read)."""
    if instance.billing not in catalogs:
        catalogs[instance.billing] = placement_catalog(billing=instance.billing)
    catalog = catalogs[instance.billing]
    request = placement_spec_again(instance, catalog).placement_request()
    zone = getattr(request.zone, "slug", request.zone)
    accelerators = {item.accelerator for item in request.items} if request.items else None
    nodes = [n for n in fleet if (zone is None or n.zone == zone)
             and (accelerators is None or n.accelerator in accelerators)]
    return place(nodes, request, catalog).ok


def waitlist_wake() -> int:
    """Walk the queue FIFO; a shape that does not fit blocks only later requests of the same shape.

    One organization's quota or funds never hold up another's request of the same shape. Each wake
    commits on its own (the pass holds a session lock, not one transaction), so an unexpected error in one
    row undoes only that row's wake (logged), and a wake's locks (organization, instance, cards) end with
    it: held to the end of the pass, a later row's organization lock deadlocked with a start or create in
    that organization waiting for a card the pass had claimed.
    """
    with advisory_lock_held("provisioning:waitlist_wake") as held:
        if not held:
            return 0
        queue = list(Instance.objects.filter(state=S.WAITLISTED).order_by("waitlisted_at", "created_at", "id"))
        woken, blocked = 0, set()
        fleet = free_snapshot() if queue else []  # one snapshot for the pass, not one per waitlisted instance
        catalogs: dict = {}
        for instance in queue:
            try:
                shape = waitlist_shape(instance)
                if shape in blocked:
                    continue
                # Only a request that fits the pass's snapshot goes on to lock and claim (with a fresh read, as
                # every claim does); the snapshot, taken before this pass's wakes, can only be more generous.
                outcome = _wake_one(instance.pk) if _fits(instance, fleet, catalogs) else NO_CAPACITY
            except Exception:  # one bad row must not stall the whole queue
                logger.exception("waitlist wake failed", extra={"instance": str(instance.pk)})
                continue
            if outcome == WOKEN:
                woken += 1
            elif outcome == NO_CAPACITY:
                blocked.add(shape)
    return woken
