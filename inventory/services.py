"""Writes to the fleet: node lifecycle, node creation and CSV import, and card allocations.

Each service owns its transaction and the audit record; capacity that becomes available is
announced through `hooks.capacity_changed` after commit.
"""
from datetime import timedelta

from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Now
from django.utils.translation import gettext

from core.errors import InsufficientCapacity, InvalidState, ValidationFailed
from tenancy.audit import audit_record

from . import hooks
from .choices import CardHealth, HolderKind, NodeState
from .lock_objects import cards_lock, node_lock
from .models import Card, CardAllocation, Node, PlacementChange

# Operator verbs → the state they set.
NODE_ACTIONS = {
    "drain": NodeState.DRAINING,
    "undrain": NodeState.AVAILABLE,
    "maintenance": NodeState.MAINTENANCE,
    "quarantine": NodeState.QUARANTINED,
    "retire": NodeState.RETIRED,
}
NODE_EDITABLE_FIELDS = ("driver", "ssh_host", "ssh_port", "fabric_address", "bmc_address", "bmc_credentials_ref")


class CardsUnavailable(InsufficientCapacity):
    """Some of the requested cards were taken, unhealthy or on a node that takes nothing new."""

    def __init__(self, message: str, *, card_ids):
        self.card_ids = sorted(card_ids)
        super().__init__(message, details={"card_ids": [str(c) for c in self.card_ids]})


def _live_allocations_on(node) -> int:
    return CardAllocation.objects.live().filter(card__node=node).count()


def node_set_state(*, node, state, reason, actor=None, request=None) -> Node:
    """Move a node to `state` (a NodeState or a verb: drain, undrain, maintenance, quarantine, retire)."""
    state = NODE_ACTIONS.get(state, state)
    if state not in NodeState.values:
        raise ValidationFailed(gettext("Unknown node state."), details={"state": [gettext('%(state)s is not a node state.') % {'state': repr(state)}]})
    reason = (reason or "").strip()
    if not reason:
        raise ValidationFailed(gettext("A reason is required."), details={"reason": [gettext("This field is required.")]})
    with transaction.atomic():
        locked = node_lock(node.pk)
        previous = locked.state
        if previous == NodeState.RETIRED:
            raise InvalidState(gettext('%(hostname)s is retired; it cannot change state.') % {'hostname': locked.hostname})
        if state == NodeState.RETIRED and (held := _live_allocations_on(locked)):
            raise InvalidState(gettext('%(hostname)s still has %(held)s allocated card(s); drain it first.') % {'hostname': locked.hostname, 'held': held},
                               details={"allocated_cards": [str(held)]})
        locked.state, locked.state_reason = state, reason[:500]
        locked.save(update_fields=["state", "state_reason"])
        Node.objects.filter(pk=locked.pk).update(state_changed_at=Now())
        audit_record(action=f"node.{state}", actor=actor, request=request, target=locked,
                     details={"from": previous, "to": state, "reason": reason, "hostname": locked.hostname})
        if state == NodeState.AVAILABLE and previous != NodeState.AVAILABLE:
            hooks.capacity_changed(accelerator_ids=[locked.accelerator_id], zone_ids=[locked.zone_id])
    locked.refresh_from_db(fields=["state_changed_at"])
    node.state, node.state_reason, node.state_changed_at = locked.state, locked.state_reason, locked.state_changed_at
    return locked


def cards_set_health(*, card_ids, health, reason, actor=None, request=None) -> int:
    """Mark cards ok / degraded / failed (an operator's finding); returns how many changed.

    A card that is not `ok` is never placed; one held by an instance keeps running until released.
    Each change is audited with the reason; cards back to `ok` announce capacity.
    """
    if health not in CardHealth.values:
        raise ValidationFailed(gettext("Unknown card health."), details={"health": [gettext('%(health)s is not a card health.') % {'health': repr(health)}]})
    reason = (reason or "").strip()
    if not reason:
        raise ValidationFailed(gettext("A reason is required."), details={"reason": [gettext("This field is required.")]})
    with transaction.atomic():
        changed = [c for c in cards_lock(card_ids) if c.health != health]
        for card in changed:
            audit_record(action="card.health", actor=actor, request=request, target=card,
                         details={"card": str(card), "from": card.health, "to": health, "reason": reason[:500]})
        Card.objects.filter(pk__in=[c.pk for c in changed]).update(health=health)
        if health == CardHealth.OK and changed:
            nodes = {c.node_id: c.node for c in changed}.values()
            hooks.capacity_changed(accelerator_ids={n.accelerator_id for n in nodes}, zone_ids={n.zone_id for n in nodes})
    return len(changed)


def _node_insert(*, hostname, zone, accelerator, card_count=8, driver="simulated", ssh_host="", ssh_port=22,
                 bmc_address="", bmc_credentials_ref="", state=NodeState.AVAILABLE, actor=None, request=None,
                 audit_action="node.create", fabric_address=None) -> Node:
    node = Node.objects.create(hostname=hostname, zone=zone, accelerator=accelerator, card_count=card_count,
                               driver=driver, ssh_host=ssh_host or hostname, ssh_port=ssh_port,
                               fabric_address=fabric_address or None,
                               bmc_address=bmc_address, bmc_credentials_ref=bmc_credentials_ref, state=state)
    Card.objects.bulk_create([Card(node=node, index=i, health=CardHealth.OK) for i in range(card_count)])
    audit_record(action=audit_action, actor=actor, request=request, target=node,
                 details={"hostname": hostname, "zone": zone.slug, "accelerator": accelerator.slug,
                          "card_count": card_count, "state": state})
    return node


def node_validate(*, hostname, zone, accelerator, card_count, driver="simulated", ssh_port=22,
                  bmc_credentials_ref="") -> dict:
    """Field errors ({field: [messages]}) of a node about to be created; empty when it is fine."""
    from .node_import import validate_node_fields

    return validate_node_fields(hostname=hostname, zone=zone, accelerator=accelerator, card_count=card_count,
                                driver=driver, ssh_port=ssh_port, bmc_credentials_ref=bmc_credentials_ref)


def bmc_credentials_ref_errors(ref) -> list[str]:
    """Why `ref` cannot be a node's bmc_credentials_ref: it must name an existing BMC credential (or be empty)."""
    from .node_import import bmc_credentials_ref_errors as errors

    return errors(ref)


def node_create(*, hostname, zone, accelerator, card_count=8, driver="simulated", ssh_host="", ssh_port=22,
                bmc_address="", bmc_credentials_ref="", state=NodeState.AVAILABLE, actor=None,
                request=None, fabric_address=None) -> Node:
    """Add a node and its `card_count` healthy cards; announces capacity when it is available."""
    errors = node_validate(hostname=hostname, zone=zone, accelerator=accelerator, card_count=card_count,
                           driver=driver, ssh_port=ssh_port, bmc_credentials_ref=bmc_credentials_ref)
    if errors:
        raise ValidationFailed(gettext("The node is invalid."), details=errors)
    try:
        with transaction.atomic():
            node = _node_insert(hostname=hostname, zone=zone, accelerator=accelerator, card_count=card_count,
                                driver=driver, ssh_host=ssh_host, ssh_port=ssh_port, bmc_address=bmc_address,
                                bmc_credentials_ref=bmc_credentials_ref, state=state, actor=actor, request=request,
                                fabric_address=fabric_address)
            if state == NodeState.AVAILABLE:
                hooks.capacity_changed(accelerator_ids=[accelerator.pk], zone_ids=[zone.pk])
    except IntegrityError as exc:  # a concurrent insert of the same hostname
        raise ValidationFailed(gettext("The node is invalid."), details={"hostname": [gettext("A node with this hostname exists.")]}) from exc
    return node


def node_update(*, node, actor=None, request=None, **fields) -> Node:
    """Change a node's connection details (driver, SSH, BMC); state changes go through node_set_state.

    A new bmc_credentials_ref must name an existing BMC credential (or be empty)."""
    unknown = set(fields) - set(NODE_EDITABLE_FIELDS)
    if unknown:
        raise ValidationFailed(gettext("These fields cannot be changed."), details={f: ["Read-only."] for f in sorted(unknown)})
    with transaction.atomic():
        locked = node_lock(node.pk)
        changed = {k: v for k, v in fields.items() if getattr(locked, k) != v}
        if "bmc_credentials_ref" in changed and (bmc_errors := bmc_credentials_ref_errors(changed["bmc_credentials_ref"])):
            raise ValidationFailed(gettext("The node is invalid."), details={"bmc_credentials_ref": bmc_errors})
        for key, value in changed.items():
            setattr(locked, key, value)
        if changed:
            locked.save(update_fields=list(changed))
            # BMC credential references are logged by name only.
            audit_record(action="node.update", actor=actor, request=request, target=locked,
                         details={"fields": sorted(changed)})
    return locked


def nodes_import_csv(*, file, actor=None, request=None) -> list[Node]:
    """Create nodes from a CSV (header row required); all or nothing — any bad row imports none.

    Raises ValidationFailed naming each bad row (spreadsheet numbering: the header is row 1) and field.
    """
    from .node_import import parse_nodes_csv

    rows = parse_nodes_csv(file)  # raises ValidationFailed before anything is written
    with transaction.atomic():
        nodes = [_node_insert(**row, actor=actor, request=request, audit_action="node.import") for row in rows]
        audit_record(action="nodes.import_csv", actor=actor, request=request, target_type="inventory.node",
                     details={"count": len(nodes), "hostnames": [n.hostname for n in nodes][:200]})
        available = [n for n in nodes if n.state == NodeState.AVAILABLE]
        if available:
            hooks.capacity_changed(accelerator_ids=[n.accelerator_id for n in available],
                                   zone_ids=[n.zone_id for n in available])
    return nodes


def cards_allocate(*, card_ids, holder_kind=HolderKind.INSTANCE, holder_id) -> list[CardAllocation]:
    """Give these cards to a holder: locks them in pk order, re-checks them, inserts live allocations.

    Raises CardsUnavailable (409 insufficient_capacity, `.card_ids` = the offending cards) when a
    card is missing, unhealthy, on a node that takes nothing new, or already held; the unique
    live-allocation constraint is the last guard against a concurrent allocator.
    """
    card_ids = sorted(set(card_ids))
    if not card_ids:
        raise ValidationFailed(gettext("No cards to allocate."), details={"card_ids": [gettext("At least one card is required.")]})
    try:
        with transaction.atomic():
            cards = cards_lock(card_ids)
            missing = set(card_ids) - {c.pk for c in cards}
            if missing:
                raise CardsUnavailable("Some cards do not exist.", card_ids=missing)
            if holder_kind != HolderKind.MAINTENANCE:  # an operator may hold any card; the pool only placeable ones
                bad = {c.pk for c in cards if c.health != CardHealth.OK or c.node.state != NodeState.AVAILABLE}
                if bad:
                    raise CardsUnavailable("Some cards are unhealthy or on nodes that take nothing new.", card_ids=bad)
            held = set(CardAllocation.objects.live().filter(card_id__in=card_ids)
                       .values_list("card_id", flat=True))
            if held:
                raise CardsUnavailable("Some cards are already allocated.", card_ids=held)
            return CardAllocation.objects.bulk_create(
                [CardAllocation(card_id=cid, holder_kind=holder_kind, holder_id=holder_id) for cid in card_ids])
    except IntegrityError as exc:
        raise CardsUnavailable("A card was allocated concurrently.", card_ids=card_ids) from exc


def cards_release(*, holder_id, card_ids=None) -> int:
    """Release a holder's live allocations (all, or only `card_ids`); returns how many were released.

    Idempotent: releasing again releases nothing. Announces capacity after commit.
    """
    with transaction.atomic():
        live = CardAllocation.objects.live().filter(holder_id=holder_id)
        if card_ids is not None:
            live = live.filter(card_id__in=list(card_ids))
        where = list(live.order_by("card_id").select_for_update(of=("self",))
                     .values_list("card__node__accelerator_id", "card__node__zone_id"))
        if not where:
            return 0
        released = live.update(released_at=Now())
        hooks.capacity_changed(accelerator_ids={a for a, _ in where}, zone_ids={z for _, z in where})
    return released


def price_errors(*, on_demand_per_card_hour, monthly_per_card_hour, effective_from) -> dict[str, list[str]]:
    """What is wrong with a new price, by the API's field names (empty: valid); the admin's price form asks too."""
    from django.utils import timezone

    errors = {}
    if not isinstance(on_demand_per_card_hour, int) or on_demand_per_card_hour <= 0:
        errors["price_per_card_hour"] = ["Must be a positive amount."]
    if monthly_per_card_hour is not None and (not isinstance(monthly_per_card_hour, int) or monthly_per_card_hour <= 0):
        errors["monthly_price_per_card_hour"] = ["Must be a positive amount or null."]
    if effective_from is not None and effective_from < timezone.now() - timedelta(minutes=5):
        errors["effective_from"] = ["A price cannot start in the past."]
    return errors


def price_create(*, accelerator, on_demand_per_card_hour, monthly_per_card_hour=None, effective_from=None,
                 actor=None, request=None):
    """Add a price from `effective_from` (default: now); history is kept, instances keep their locked rate."""
    from django.utils import timezone

    from .models import Price

    effective_from = effective_from or timezone.now()
    errors = price_errors(on_demand_per_card_hour=on_demand_per_card_hour, monthly_per_card_hour=monthly_per_card_hour,
                          effective_from=effective_from)
    if errors:
        raise ValidationFailed(gettext("The price is invalid."), details=errors)
    try:
        with transaction.atomic():
            price = Price.objects.create(accelerator=accelerator, on_demand_per_card_hour=on_demand_per_card_hour,
                                         monthly_per_card_hour=monthly_per_card_hour, effective_from=effective_from)
            audit_record(action="price.create", actor=actor, request=request, target=price,
                         details={"accelerator": accelerator.slug, "on_demand": on_demand_per_card_hour,
                                  "monthly": monthly_per_card_hour, "effective_from": effective_from.isoformat()})
    except IntegrityError as exc:
        raise ValidationFailed(gettext("The price is invalid."),
                               details={"effective_from": [gettext("A price already starts at this time.")]}) from exc
    return price


def image_save(*, image, actor=None, request=None, **fields):
    """Create (image unsaved) or update an image; audited."""
    creating = image._state.adding
    for key, value in fields.items():
        setattr(image, key, value)
    with transaction.atomic():
        try:
            with transaction.atomic():
                image.save()
        except IntegrityError as exc:
            raise ValidationFailed(gettext("The image is invalid."), details={"slug": [gettext("An image with this slug exists.")]}) from exc
        audit_record(action="image.create" if creating else "image.update", actor=actor, request=request,
                     target=image, details={"slug": image.slug, "fields": sorted(fields)})
    return image


def _audited(value):
    """A field's value as an audit record's JSON keeps it (decimals as their text)."""
    return value if value is None or isinstance(value, (bool, int, str)) else str(value)


def _create_by_slug(obj, fields: dict, noun: str, a_noun: str) -> None:
    """Save a new zone or accelerator with `fields`; a slug another took meanwhile (the form checked it before)
    is a refusal, not a database error."""
    for key, value in fields.items():
        setattr(obj, key, value)
    try:
        with transaction.atomic():
            obj.save()
    except IntegrityError as exc:
        raise ValidationFailed(gettext('The %(noun)s is invalid.') % {'noun': noun},
                               details={"slug": [gettext('%(a_noun)s with this slug exists.') % {'a_noun': a_noun}]}) from exc


def _update_changed(stored, fields: dict, shown) -> dict:
    """Write the fields that differ from the locked row `stored`. → {field: {"old", "new"}} as `shown` renders
    them, for the audit record (empty: nothing changed, nothing written)."""
    changed = {k: {"old": shown(getattr(stored, k)), "new": shown(v)} for k, v in fields.items()
               if getattr(stored, k) != v}
    for key in changed:
        setattr(stored, key, fields[key])
    if changed:
        stored.save(update_fields=list(changed))
    return changed


def accelerator_save(*, accelerator, actor=None, request=None, **fields):
    """Create (accelerator unsaved) or update an accelerator; audited (an update with each changed field's old and
    new value, as stored: the admin's form has already written the new values onto `accelerator`).

    Slug and vendor are fixed once created: instances' items, meters and statements name the slug, placement and
    images the vendor."""
    from .models import Accelerator

    with transaction.atomic():
        if accelerator._state.adding:
            _create_by_slug(accelerator, fields, "accelerator", "An accelerator")
            audit_record(action="accelerator.create", actor=actor, request=request, target=accelerator,
                         details={f.name: _audited(getattr(accelerator, f.name)) for f in Accelerator._meta.fields
                                  if f.name != "id"})
            return accelerator
        stored = Accelerator.objects.select_for_update().get(pk=accelerator.pk)
        fixed = {k: [f"An accelerator's {k} cannot change."] for k in ("slug", "vendor")
                 if fields.get(k, getattr(stored, k)) != getattr(stored, k)}
        if fixed:
            raise ValidationFailed(gettext("The accelerator is invalid."), details=fixed)
        changed = _update_changed(stored, fields, _audited)
        if changed:
            audit_record(action="accelerator.update", actor=actor, request=request, target=stored,
                         details={"slug": stored.slug, "fields": changed})
    for key in fields:
        setattr(accelerator, key, getattr(stored, key))
    return stored


def zone_save(*, zone, actor=None, request=None, **fields):
    """Create (zone unsaved) or update a zone; audited (an update with each changed field's old and new value, as
    stored: the admin's form has already written the new values onto `zone`).

    The slug is fixed once created: nodes, instances (their zone pin), waitlisted shapes and placement name it.
    """
    from .models import Zone

    with transaction.atomic():
        if zone._state.adding:
            _create_by_slug(zone, fields, "zone", "A zone")
            audit_record(action="zone.create", actor=actor, request=request, target=zone,
                         details={"slug": zone.slug, "name": zone.name, "fabric_kind": zone.fabric_kind,
                                  "fabric_gbps": zone.fabric_gbps,
                                  "inter_node_floor_gbps": str(zone.inter_node_floor_gbps),
                                  "cluster_network": zone.cluster_network})
            return zone
        stored = Zone.objects.select_for_update().get(pk=zone.pk)
        if fields.get("slug", stored.slug) != stored.slug:
            raise ValidationFailed(gettext("The zone is invalid."), details={"slug": [gettext("A zone's slug cannot change.")]})
        changed = _update_changed(stored, fields, str)
        if changed:
            audit_record(action="zone.update", actor=actor, request=request, target=stored,
                         details={"slug": stored.slug, "fields": changed})
    for key in fields:
        setattr(zone, key, getattr(stored, key))
    return stored


def placement_changes_prune(*, older_than: timedelta = timedelta(minutes=10)) -> int:
    """Delete placement change rows older than `older_than`; returns how many.

    One marker row records the highest deleted row and transaction ids: a worker that may not have
    read a deleted row (its last read saw fewer rows, or waited on a transaction up to that id)
    rebuilds from the whole fleet; any other worker had already read them all.
    """
    table = PlacementChange._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"""
            WITH gone AS (
                DELETE FROM {table} WHERE created_at < now() - %s RETURNING id, xid),
            marker AS (
                INSERT INTO {table} (node_id, xid, horizon, horizon_xid, created_at)
                SELECT NULL, pg_current_xact_id()::text::bigint, max(id), max(xid), now() FROM gone
                HAVING count(*) > 0)
            SELECT count(*) FROM gone""", [older_than])
        return cursor.fetchone()[0]
