"""Reads of the fleet and the catalog: stock, prices and the placement snapshot, each in a fixed
number of queries whatever the size of the fleet."""
import json
import uuid
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal

from django.conf import settings
from django.db import connection
from django.db.models import Count, Exists, OuterRef, Q, Subquery
from django.db.models.functions import Now
from django.utils.translation import gettext

from core.errors import NotFoundError, ValidationFailed

from .choices import CardHealth, NodeState
from .models import Accelerator, Card, CardAllocation, CustomImage, Image, Node, PlacementChange, Price, Zone

_ZERO = {"available_cards": 0, "allocated_cards": 0, "total_cards": 0}


class Stock(dict):
    """slug (or (zone, slug)) → counts; a key with no cards reads as zeros instead of raising."""

    def __missing__(self, key):
        return dict(_ZERO)


class PriceMissing(ValidationFailed):
    """The accelerator has no price in effect (e.g. not orderable yet)."""


def _live_allocation():
    return CardAllocation.objects.live().filter(card=OuterRef("pk"))


def _stock_aggregates() -> dict:
    held = Exists(_live_allocation())
    return {
        "total_cards": Count("pk"),
        "allocated_cards": Count("pk", filter=Q(held)),
        "available_cards": Count("pk", filter=Q(node__state=NodeState.AVAILABLE, health=CardHealth.OK) & ~Q(held)),
    }


def _stock_cards(zone=None):
    cards = Card.objects.exclude(node__state=NodeState.RETIRED)
    if zone is not None:
        cards = cards.filter(node__zone=zone) if not isinstance(zone, str) else cards.filter(node__zone__slug=zone)
    return cards


def stock_by_accelerator(zone=None) -> dict[str, dict[str, int]]:
    """{slug: {available_cards, allocated_cards, total_cards}} in one query.

    available = healthy cards without a live allocation on `available` nodes; allocated = cards with a
    live allocation; total = every card on a node that is not retired. `zone` is a Zone or a slug.
    """
    rows = (_stock_cards(zone).order_by().values("node__accelerator__slug").annotate(**_stock_aggregates()))
    return Stock({r.pop("node__accelerator__slug"): r for r in rows})


def stock_by_zone() -> dict[tuple[str, str], dict[str, int]]:
    """{(zone slug, accelerator slug): {available_cards, allocated_cards, total_cards}} in one query."""
    rows = (_stock_cards().order_by().values("node__zone__slug", "node__accelerator__slug")
            .annotate(**_stock_aggregates()))
    return Stock({(r.pop("node__zone__slug"), r.pop("node__accelerator__slug")): r for r in rows})


def zone_stock() -> dict[str, list[dict]]:
    """{zone slug: [{accelerator, available_cards, total_cards}, …]} per accelerator with cards there (by slug),
    in one query whatever the number of zones."""
    out: dict[str, list[dict]] = {}
    for (zone, accelerator), row in sorted(stock_by_zone().items()):
        out.setdefault(zone, []).append({"accelerator": accelerator, "available_cards": row["available_cards"],
                                         "total_cards": row["total_cards"]})
    return out


def zone_for_filter(slug: str) -> Zone:
    """The zone a `?zone=` names; an unknown one is a 400 that says where the zones are listed."""
    zone = Zone.objects.filter(slug=slug).first() if "\x00" not in slug else None
    if zone is None:
        raise ValidationFailed(gettext('Unknown zone %(slug)s.') % {'slug': repr(slug)},
                               details={"zone": [gettext('No zone has the slug %(slug)s; GET /api/v1/zones/ lists them.') % {'slug': repr(slug)}]})
    return zone


def monthly_default(on_demand: int) -> int:
    """floor(on-demand × MONTHLY_DISCOUNT) µCNY, computed in decimal so 0.65 is exact."""
    discount = Decimal(str(settings.MONTHLY_DISCOUNT))
    return int((Decimal(on_demand) * discount).to_integral_value(rounding=ROUND_FLOOR))


def _effective(prices, at):
    return prices.filter(effective_from__lte=Now() if at is None else at).order_by("-effective_from")


def with_current_prices(accelerators, at=None):
    """Annotate `on_demand_ucny` and `monthly_set_ucny` (None = default) on an Accelerator queryset."""
    current = _effective(Price.objects.filter(accelerator=OuterRef("pk")), at)
    return accelerators.annotate(
        on_demand_ucny=Subquery(current.values("on_demand_per_card_hour")[:1]),
        monthly_set_ucny=Subquery(current.values("monthly_per_card_hour")[:1]),
    )


def price_pair(on_demand: int | None, monthly: int | None) -> tuple[int, int] | None:
    """(on-demand, monthly) with the monthly default applied; None when there is no price."""
    if on_demand is None:
        return None
    return on_demand, (monthly if monthly is not None else monthly_default(on_demand))


def current_price(accelerator, at=None) -> tuple[int, int]:
    """(on-demand, monthly) µCNY per card-hour in effect at `at` (default: the database's now).

    `accelerator` is an Accelerator, its pk or its slug. Raises PriceMissing (400) when none is in effect.
    """
    if isinstance(accelerator, Accelerator):
        prices = Price.objects.filter(accelerator=accelerator)
        slug = accelerator.slug
    elif isinstance(accelerator, str) and not _looks_like_uuid(accelerator):
        prices = Price.objects.filter(accelerator__slug=accelerator)
        slug = accelerator
    else:
        prices = Price.objects.filter(accelerator_id=accelerator)
        slug = str(accelerator)
    row = _effective(prices, at).values_list("on_demand_per_card_hour", "monthly_per_card_hour").first()
    if row is None:
        raise PriceMissing(f"{slug} has no price in effect; it cannot be ordered.",
                           details={"accelerator": [gettext('%(slug)s is not orderable.') % {'slug': slug}]})
    return price_pair(*row)


def _looks_like_uuid(text: str) -> bool:
    return len(text) == 36 and text.count("-") == 4


def current_prices(at=None) -> dict[str, tuple[int, int]]:
    """{slug: (on-demand, monthly)} for every accelerator with a price in effect, in one query."""
    rows = with_current_prices(Accelerator.objects.order_by(), at).values_list("slug", "on_demand_ucny",
                                                                                "monthly_set_ucny")
    return {slug: price_pair(od, mo) for slug, od, mo in rows if od is not None}


def placement_snapshot(zone=None, accelerators=None) -> list[dict]:
    """Every non-retired node as {id, zone, accelerator, card_count, free, state}, in two queries.

    `free` is the frozenset of card indices that are healthy and hold no live allocation (computed
    for every state; the placement engine only uses nodes whose state is `available`).
    `zone` is a Zone or slug; `accelerators` an iterable of Accelerators or slugs.
    """
    nodes = Node.objects.exclude(state=NodeState.RETIRED)
    if zone is not None:
        nodes = nodes.filter(zone__slug=getattr(zone, "slug", zone))
    if accelerators is not None:
        nodes = nodes.filter(accelerator__slug__in=[getattr(a, "slug", a) for a in accelerators])
    rows = list(nodes.order_by("hostname").values("id", "zone__slug", "accelerator__slug", "card_count", "state"))
    free: dict = {r["id"]: set() for r in rows}
    if rows:
        cards = (Card.objects.filter(node_id__in=list(free), health=CardHealth.OK)
                 .exclude(Exists(_live_allocation())).values_list("node_id", "index"))
        for node_id, index in cards:
            free[node_id].add(index)
    return [{"id": r["id"], "zone": r["zone__slug"], "accelerator": r["accelerator__slug"],
             "card_count": r["card_count"], "free": frozenset(free[r["id"]]), "state": r["state"]} for r in rows]


@dataclass(frozen=True)
class PlacementMark:
    """How far a reader of the change log got: the highest row it could see, and the transactions that
    were still writing then (their rows may sit below that row), its own included."""

    last_id: int = 0
    pending: tuple[int, ...] = ()


@dataclass(frozen=True)
class PlacementChanges:
    """What changed for placement since a mark (see PlacementChange), read in one statement."""

    mark: PlacementMark  # where the next read starts
    node_ids: frozenset  # nodes changed by rows this reader had not seen
    own: frozenset  # nodes this transaction changed and has not committed (re-read next time)
    rebuild: bool  # a marker says unseen rows may be gone: read the whole fleet again
    nodes: list = field(default_factory=list)  # placement_snapshot rows of node_ids that still take part


_LOG = PlacementChange._meta.db_table
_OWN = "pg_current_xact_id_if_assigned()::text::bigint"
_MARK = f"""(SELECT coalesce(max(id), 0) FROM {_LOG}),
       ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(pg_current_snapshot()) AS x) || {_OWN}"""
# One call, one snapshot, one round trip: the mark, the changed nodes' ids and their state now. A row is new to
# a reader if it lies above the highest row it saw, or belongs to a transaction that was still writing when it
# read: a later transaction takes later row ids, an earlier one was either committed (seen) or pending. So a
# read costs what changed since, not the fleet. The function (migration inventory 0011) keeps its plans per
# session and reads the changed nodes by primary key.
# The two constants are written into the statement (plain identifiers of this code): fewer parameters to adapt
# per decision, which runs this on every placement.
assert CardHealth.OK.isidentifier() and NodeState.RETIRED.isidentifier()
_CHANGES_SQL = ("SELECT last_id, pending, changed, own, rebuild, nodes FROM inventory_placement_changes("
                f"%(last)s, %(pending)s::bigint[], %(also)s::uuid[], '{CardHealth.OK}', '{NodeState.RETIRED}')")


def _mark(last_id, pending) -> PlacementMark:
    return PlacementMark(last_id, tuple(x for x in pending if x is not None))


def placement_changes(*, since: PlacementMark, also=()) -> PlacementChanges:
    """Nodes changed in change rows new since `since` (an earlier read's mark), plus the nodes `also`, with
    their placement snapshot rows now (as `placement_snapshot`; a retired or deleted node has none)."""
    params = {"last": since.last_id, "pending": list(since.pending), "also": [str(i) for i in also]}
    with connection.cursor() as cursor:
        cursor.execute(_CHANGES_SQL, params)
        last_id, pending, changed, own, rebuild, nodes = cursor.fetchone()
    if isinstance(nodes, str):
        nodes = json.loads(nodes)
    rows = [{**n, "free": frozenset(n["free"])} for n in nodes]
    return PlacementChanges(_mark(last_id, pending), frozenset(str(i) for i in changed),
                            frozenset(str(i) for i in own), rebuild, rows)


def placement_mark() -> PlacementMark:
    """Where an index built from a read right after this one starts reading changes next time."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {_MARK}")
        return _mark(*cursor.fetchone())


def node_get(*, node_id) -> Node:
    """One node with its zone and accelerator, or 404."""
    node = Node.objects.select_related("zone", "accelerator").filter(pk=node_id).first()
    if node is None:
        raise NotFoundError(gettext("No such node."))
    return node


def node_card_counts(nodes):
    """Annotate cards_free / cards_allocated / cards_failed on a Node queryset (one query)."""
    held = Exists(CardAllocation.objects.live().filter(card=OuterRef("cards__pk")))
    return nodes.annotate(
        cards_allocated=Count("cards", filter=Q(held)),
        cards_free=Count("cards", filter=Q(cards__health=CardHealth.OK) & ~Q(held)),
        cards_failed=Count("cards", filter=Q(cards__health=CardHealth.FAILED)),
    )


def allocations_live(*, holder_id) -> list[CardAllocation]:
    """The live allocations of one holder, with card → node → zone/accelerator, in card pk order."""
    return list(CardAllocation.objects.live().filter(holder_id=holder_id)
                .select_related("card__node__zone", "card__node__accelerator").order_by("card_id"))


def capacity_by_zone() -> list[dict]:
    """The operators' capacity view: per accelerator and zone, cards on non-retired nodes split into free (healthy,
    unheld, on available nodes), allocated (held), failed (health failed), draining (unheld on draining nodes) and
    otherwise out (unheld on nodes in maintenance, quarantine, cleaning or unreachable), with node counts. One query."""
    held = Exists(_live_allocation())
    out_states = [NodeState.MAINTENANCE, NodeState.QUARANTINED, NodeState.CLEANING, NodeState.UNREACHABLE]
    rows = (_stock_cards().order_by()
            .values("node__accelerator_id", "node__accelerator__slug", "node__accelerator__name", "node__zone_id",
                    "node__zone__slug", "node__zone__name")
            .annotate(total=Count("pk"), nodes=Count("node", distinct=True), allocated=Count("pk", filter=Q(held)),
                      free=Count("pk", filter=Q(node__state=NodeState.AVAILABLE, health=CardHealth.OK) & ~Q(held)),
                      failed=Count("pk", filter=Q(health=CardHealth.FAILED)),
                      draining=Count("pk", filter=Q(node__state=NodeState.DRAINING) & ~Q(held)),
                      out=Count("pk", filter=Q(node__state__in=out_states) & ~Q(held)))
            .order_by("node__accelerator__name", "node__zone__slug"))
    return [{"accelerator": r["node__accelerator__name"], "accelerator_slug": r["node__accelerator__slug"],
             "accelerator_id": r["node__accelerator_id"], "zone_id": r["node__zone_id"],
             "zone": r["node__zone__name"], "zone_slug": r["node__zone__slug"],
             **{k: r[k] for k in ("total", "nodes", "allocated", "free", "failed", "draining", "out")}} for r in rows]


def card_held():
    """Exists(a live allocation of the outer Card row): for filters on Card querysets."""
    return Exists(_live_allocation())


def cards_with_live_holder():
    """Every card (node → accelerator loaded), by node and index, with its live allocation's holder id, kind
    and time annotated (None when free); one query."""
    live = _live_allocation()
    return (Card.objects.select_related("node__accelerator").order_by("node__hostname", "index")
            .annotate(live_holder_id=Subquery(live.values("holder_id")[:1]),
                      live_holder_kind=Subquery(live.values("holder_kind")[:1]),
                      live_allocated_at=Subquery(live.values("allocated_at")[:1])))


def accelerator_list():
    """Every accelerator, by slug."""
    return Accelerator.objects.order_by("slug")


def accelerators_orderable():
    """The accelerators customers can order, by vendor then slug."""
    return Accelerator.objects.filter(orderable=True).order_by("vendor", "slug")


def accelerator_names(slugs=None) -> dict[str, str]:
    """{slug: display name} of the given accelerators (all when `slugs` is None); one query."""
    qs = Accelerator.objects.all() if slugs is None else Accelerator.objects.filter(slug__in=set(slugs))
    return dict(qs.values_list("slug", "name"))


def zone_list(slugs=None):
    """The zones (those among `slugs` when given), by slug."""
    qs = Zone.objects.order_by("slug")
    return qs if slugs is None else qs.filter(slug__in=set(slugs))


def image_list(*, active_only: bool):
    """The images (only the active ones when `active_only`), by slug."""
    qs = Image.objects.order_by("slug")
    return qs.filter(active=True) if active_only else qs


def images_named(slugs) -> list[Image]:
    """The images among `slugs`, in that order (a slug no longer in the catalog is left out)."""
    by_slug = {i.slug: i for i in Image.objects.filter(slug__in=set(slugs))}
    return [by_slug[s] for s in dict.fromkeys(slugs) if s in by_slug]


def node_list():
    """Every node with zone and accelerator, by hostname, its card counts annotated (one query)."""
    return node_card_counts(Node.objects.select_related("zone", "accelerator").order_by("hostname"))


def price_list():
    """The price history, by accelerator and newest first."""
    return Price.objects.select_related("accelerator").order_by("accelerator__slug", "-effective_from")


def custom_image_list(*, org, ready_only: bool = False):
    """The organization's private images, by name (only those ready to run when `ready_only`)."""
    qs = CustomImage.objects.filter(organization=org).order_by("name")
    return qs.filter(state="ready") if ready_only else qs


def custom_image_get(*, org, image_id) -> CustomImage:
    """One of the organization's private images; 404 for another organization's or a malformed id."""
    try:
        return CustomImage.objects.get(organization=org, pk=uuid.UUID(str(image_id)))
    except (ValueError, CustomImage.DoesNotExist):
        raise NotFoundError("No such image.") from None


def custom_images_by_ids(*, org, ids) -> dict:
    """{str(id): CustomImage} of the organization's ready images among `ids` (strings that are not ids skipped)."""
    wanted = []
    for value in ids:
        try:
            wanted.append(uuid.UUID(str(value)))
        except ValueError:
            continue
    if not wanted:
        return {}
    return {str(i.pk): i for i in CustomImage.objects.filter(organization=org, pk__in=wanted, state="ready")}


def custom_images_for_run(ids) -> dict:
    """{str(id): CustomImage} among `ids` whatever the organization (the worker, for an instance it already holds)."""
    wanted = []
    for value in ids:
        try:
            wanted.append(uuid.UUID(str(value)))
        except ValueError:
            continue
    return {str(i.pk): i for i in CustomImage.objects.filter(pk__in=wanted)} if wanted else {}
