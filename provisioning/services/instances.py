"""Customer-facing instance writes: create, stop, start, terminate (SPEC §3)."""
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import InsufficientCapacity, QuotaExceeded, ValidationFailed
from core.outbox import outbox_send
from inventory.models import Zone
from tenancy.audit import audit_record
from tenancy.lock_objects import organization_lock
from tenancy.models import Organization, SshKey
from tenancy.realname.policy import accelerator_allowed, instance_check
from tenancy.selectors import ssh_keys_by_ids

from ..choices import InstanceKind, can_transition
from ..choices import InstanceState as S
from ..lock_objects import instance_lock
from ..models import Instance
from ..placement import Item, PlacementRequest
from ..selectors import org_cards_in_use
from . import billing_port, storage_port
from .capacity import placement_catalog
from .claims import placement_claim, placement_decide
from .sla import sla_settle
from .specs import InstanceSpec, images_resolve, placement_invalid, placement_message, spec_check
from .transitions import event_record, instance_transition
from .warm_pool import warm_take

# How long a step may take before the reconciler acts (container; bare metal gets 3×).
STEP_SECONDS = 15 * 60


def instance_dispatch(instance_id) -> None:
    # Through the transactional outbox (core/outbox.py): a broker outage delays the step, never loses it.
    outbox_send("provisioning.instance_advance", args=[str(instance_id)])


def step_deadline(instance: Instance, now):
    """When the reconciler may act on an instance stuck in its current step."""
    factor = 3 if instance.kind == "bare_metal" else 1
    return now + timedelta(seconds=STEP_SECONDS * factor)


def _ssh_keys(actor, ids) -> list[SshKey]:
    """The creator's own keys, in the order given (400 when one is not theirs)."""
    ids = [str(i) for i in ids or []]
    keys = {str(k.pk): k for k in ssh_keys_by_ids(user=actor, ids=ids)} if ids else {}
    unknown = [i for i in ids if i not in keys]
    if unknown:
        raise ValidationFailed(gettext("The request is invalid."),
                               details={"ssh_key_ids": [gettext("Unknown SSH key %(id)s.") % {"id": i} for i in unknown]})
    return [keys[i] for i in ids]


def _quota_check(org: Organization, cards: int) -> None:
    """409 quota_exceeded when the org's allocated cards plus these pass its quota."""
    in_use = org_cards_in_use(org=org)
    if in_use + cards > org.card_quota:
        raise QuotaExceeded(
            gettext("This needs %(cards)s card(s); %(in_use)s of the organization's quota of %(card_quota)s are in use.") % {'cards': cards, 'in_use': in_use, 'card_quota': org.card_quota},
            details={"quota": [str(org.card_quota)], "in_use": [str(in_use)], "requested": [str(cards)]})


def _claim_or_waitlist(*, instance: Instance, request: PlacementRequest, catalog, spec: InstanceSpec, actor,
                       reason: str, now) -> None:
    """Place and claim (a bare-metal request takes warm nodes first: services/warm_pool.py); on success lock the
    rates and go provisioning, else waitlist or raise 409."""
    result = None
    if request.kind == InstanceKind.BARE_METAL and spec.items:
        result = warm_take(instance=instance, request=request, images=images_resolve(spec, spec.items, catalog,
                                                                                org=instance.organization),
                           catalog=catalog)
    result = result or placement_claim(instance=instance, request=request, catalog=catalog)
    placement_invalid(result)
    if not result.ok:
        if not instance.waitlist:
            raise InsufficientCapacity(placement_message(result),
                                       details={"missing": [f"{k}: {v}" for k, v in sorted(result.missing.items())]})
        locked = {}
        if spec.items:  # the rates this request accepted; the wake keeps them (services/waitlist.py)
            items = [{"accelerator": it.accelerator, "count": it.count,
                      "rate": catalog[it.accelerator].price_per_card_hour} for it in spec.items]
            locked = {"items": items, "price_per_hour": sum(it["rate"] * it["count"] for it in items)}
        instance_transition(instance=instance, to=S.WAITLISTED, reason=f"{reason}: sold out", actor=actor,
                            waitlisted_at=now, sla_deadline=None, step_deadline=None, **locked)
        return
    items = [{"accelerator": it.accelerator, "count": it.count, "rate": catalog[it.accelerator].price_per_card_hour}
             for it in result.items]
    images = images_resolve(spec, result.items, catalog, org=instance.organization)
    price = sum(it["rate"] * it["count"] for it in items)
    billing_port.funds_check(org=instance.organization, price_per_hour=price, billing=instance.billing)
    instance_transition(instance=instance, to=S.PROVISIONING, reason=f"{reason}: placed", actor=actor,
                        items=items, images=images, price_per_hour=price, step_deadline=step_deadline(instance, now))


def instance_create(*, org: Organization, actor, spec: InstanceSpec, name: str, ssh_key_ids=(),
                    waitlist: bool = False, package_renewal: str = "stop", request=None, volumes=(),
                    datasets=()) -> Instance:
    """Validate, check quota and funds, place and claim cards, attach `volumes` ([{volume, mount_path?}]) and
    mount `datasets` (slugs), then hand over to the worker.

    No capacity → 409 insufficient_capacity (nothing kept) unless `waitlist` → state waitlisted.
    """
    volumes, datasets = list(volumes), list(datasets)
    if volumes or datasets:  # they pin the zone: placement searches only there
        spec = storage_port.create_spec_zone(org=org, spec=spec, volumes=volumes, datasets=datasets)
    catalog = placement_catalog(billing=spec.billing)
    spec_check(spec, catalog)
    # Real-name policy (403 verification_required); a card-mix policy simply never places refused types.
    instance_check(org, accelerators=[it.accelerator for it in spec.items], bare_metal=spec.kind == InstanceKind.BARE_METAL)
    catalog = {slug: entry for slug, entry in catalog.items() if accelerator_allowed(org, slug)}
    keys = _ssh_keys(actor, ssh_key_ids)
    if spec.items:
        images_resolve(spec, spec.items, catalog, org=org)  # fail fast, before any lock is taken
        estimate = sum(catalog[it.accelerator].price_per_card_hour * it.count for it in spec.items)
    else:
        estimate = 0  # a policy's price is known once the mix is chosen
    cards = sum(it.count for it in spec.items) if spec.items else spec.policy.total_cards
    with transaction.atomic():
        # One create at a time per organization, so two requests cannot both pass the quota.
        org = organization_lock(org.pk)
        _quota_check(org, cards)
        if estimate:
            billing_port.funds_check(org=org, price_per_hour=estimate, billing=spec.billing)
        now = db_now()
        instance = Instance.objects.create(
            organization=org, creator=actor, name=name, kind=spec.kind,
            items=[{"accelerator": it.accelerator, "count": it.count,
                    "rate": catalog[it.accelerator].price_per_card_hour} for it in spec.items],
            policy=({"total_cards": spec.policy.total_cards,
                     "compatible_vendors": list(spec.policy.compatible_vendors),
                     "min_domestic_share": spec.policy.min_domestic_share} if spec.policy else None),
            image=spec.image, images=spec.images, ssh_key_ids=[str(k.pk) for k in keys],
            ssh_public_keys=[k.public_key for k in keys], billing=spec.billing, package_renewal=package_renewal,
            waitlist=waitlist, zone=None, price_per_hour=estimate, sla_deadline=now + timedelta(
                seconds=settings.SLA_SECONDS),
        )
        if spec.zone:
            instance.zone_id = _zone_id(spec.zone)
            instance.save(update_fields=["zone"])
        created = event_record(instance=instance, from_state="", to_state=S.PENDING, reason="create", actor=actor,
                               at=now)
        instance.sla_event_id = created.pk
        instance.save(update_fields=["sla_event_id"])
        _claim_or_waitlist(instance=instance, request=spec.placement_request(), catalog=catalog, spec=spec,
                           actor=actor, reason="create", now=now)
        if volumes or datasets:
            storage_port.attach_at_create(instance=instance, volumes=volumes, datasets=datasets, actor=actor,
                                          request=request)
        audit_record(action="instance.create", org=org, actor=actor, target=instance, request=request,
                     details={"kind": spec.kind, "items": instance.items, "policy": instance.policy,
                              "state": instance.state, "price_per_hour": instance.price_per_hour})
        if instance.state == S.PROVISIONING:
            instance_dispatch(instance.pk)
    return instance


def _zone_id(slug):
    return Zone.objects.only("pk").get(slug=slug).pk


def instance_stop(*, org: Organization, instance_id, actor, request=None) -> Instance:
    """running → stopping (meters close now); the worker releases the cards and the state becomes stopped."""
    with transaction.atomic():
        instance = instance_lock(instance_id=instance_id, org=org)
        now = db_now()
        instance_transition(instance=instance, to=S.STOPPING, reason="stop requested", actor=actor, now=now,
                            step_deadline=step_deadline(instance, now))
        audit_record(action="instance.stop", org=org, actor=actor, target=instance, request=request)
        instance_dispatch(instance.pk)
    return instance


def instance_start(*, org: Organization, instance_id, actor, request=None) -> Instance:
    """stopped → starting → placed again at today's rates (provisioning), waitlisted, or 409 when sold out."""
    with transaction.atomic():
        org = organization_lock(org.pk)
        instance = instance_lock(instance_id=instance_id, org=org)
        # Settle the previous window before its breach id is replaced: the beat may not have seen it
        # yet (stopped and started within a minute), and afterwards nothing would (sla.py: once per id).
        # A refused start (409) rolls this back too and leaves the window to the beat.
        if can_transition(instance.state, S.STARTING) and sla_settle(instance_id=instance.pk) is not None:
            instance.refresh_from_db(fields=["sla_settled_event_id", "sla_compensation"])
        now = db_now()
        # ready_at belongs to the previous run; the new window's outcome starts unknown (SLA, body, console).
        event = instance_transition(instance=instance, to=S.STARTING, reason="start requested", actor=actor,
                                    sla_deadline=now + timedelta(seconds=settings.SLA_SECONDS), ready_at=None)
        instance.sla_event_id = event.pk
        instance.save(update_fields=["sla_event_id"])
        _quota_check(org, instance.card_total)
        catalog = placement_catalog(billing=instance.billing)
        spec = placement_spec_again(instance, catalog)
        spec_check(spec, catalog)
        _claim_or_waitlist(instance=instance, request=spec.placement_request(), catalog=catalog, spec=spec,
                           actor=actor, reason="start", now=now)
        audit_record(action="instance.start", org=org, actor=actor, target=instance, request=request,
                     details={"state": instance.state, "price_per_hour": instance.price_per_hour})
        if instance.state == S.PROVISIONING:
            instance_dispatch(instance.pk)
    return instance


def placement_spec_again(instance: Instance, catalog) -> InstanceSpec:
    """What a start or a waitlist wake places: the instance's last mix, or — for a policy instance whose last
    mix does not fit now — any mix its policy allows."""
    spec = instance_spec(instance)
    if instance.policy and spec.items and not placement_decide(spec.placement_request(), catalog).ok:
        return instance_spec(instance, by_policy=True)
    return spec


def instance_spec(instance: Instance, *, by_policy: bool = False) -> InstanceSpec:
    """The spec to place an existing instance again: its chosen mix (or its policy if it has no mix yet, or
    when `by_policy`)."""
    from ..placement import Policy

    items = () if by_policy and instance.policy else tuple(Item(it["accelerator"], int(it["count"]))
                                                             for it in instance.items)
    policy = None
    if not items and instance.policy:
        p = instance.policy
        policy = Policy(p["total_cards"], tuple(p["compatible_vendors"]), float(p.get("min_domestic_share", 0)))
    return InstanceSpec(kind=instance.kind, items=items, policy=policy,
                        zone=instance.zone.slug if instance.zone_id else None, image=instance.image,
                        images=dict(instance.images), billing=instance.billing)


def instance_terminate(*, org: Organization, instance_id, actor, request=None) -> Instance:
    """Any state → terminating (idempotent: terminating/terminated answer as they are)."""
    with transaction.atomic():
        instance = instance_lock(instance_id=instance_id, org=org)
        if instance.state in (S.TERMINATING, S.TERMINATED):
            return instance
        now = db_now()
        instance_transition(instance=instance, to=S.TERMINATING, reason="terminate requested", actor=actor, now=now,
                            step_deadline=step_deadline(instance, now))
        billing_port.package_renewal_set(instance=instance, renewal="stop", actor=actor, request=request)
        audit_record(action="instance.terminate", org=org, actor=actor, target=instance, request=request)
        instance_dispatch(instance.pk)
    return instance


def instances_autostop(*, org_id, at=None, reason: str = "funds_exhausted") -> list:
    """Billing's auto-stop: stop the organization's running on-demand instances whose meters billing capped at
    the exhaustion second; returns their ids. One started since (funds topped up meanwhile) has an uncapped meter
    and runs on: before, a late or repeated request stopped it too, closing its meter before it opened."""
    stopped = []
    ids = list(Instance.objects.filter(organization_id=org_id, state=S.RUNNING, billing="on_demand",
                                       pk__in=billing_port.capped_instance_ids(org_id=org_id))
               .order_by("pk").values_list("pk", flat=True))
    for instance_id in ids:
        with transaction.atomic():
            instance = instance_lock(instance_id=instance_id)
            if instance.state != S.RUNNING:
                continue
            if at is not None:
                # Billing covers up to the exhaustion second (SPEC §4); the transition's own close is then a no-op.
                billing_port.meters_close(instance_id=instance.pk, at=at)
            instance_transition(instance=instance, to=S.STOPPING, reason=f"auto-stop: {reason}",
                                step_deadline=step_deadline(instance, db_now()))
            audit_record(action="instance.autostop", org=instance.organization, target=instance,
                         details={"reason": reason, "at": str(at) if at else None})
            instance_dispatch(instance.pk)
        stopped.append(instance_id)
    return stopped
