"""Reads of instances, always scoped to an organization (another tenant's id → 404)."""
import uuid
from datetime import UTC, datetime
from functools import lru_cache
from typing import NamedTuple

import orjson
from django.db import connection
from django.db.models import (
    BigIntegerField,
    Case,
    F,
    Func,
    JSONField,
    OuterRef,
    Prefetch,
    Q,
    Subquery,
    TextField,
    Value,
    When,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Coalesce
from django.db.models.lookups import IsNull
from django.utils.translation import gettext

from billing.selectors import instance_cost_totals, instance_costs
from core.dbclock import db_now
from core.errors import NotFoundError
from core.querysets import json_rows
from inventory.models import CardAllocation
from inventory.selectors import images_named

from . import body_cache, http_ports
from .body_cache import Kept, body_cut, body_format, plain_body_text
from .choices import InstanceKind, ReportScope
from .choices import InstanceState as S
from .models import HealthIncident, Instance, InstanceEvent, NodeGroup, PortShare, ReadinessReport


def _live_groups():
    return Prefetch("groups", queryset=NodeGroup.objects.live()
                    .select_related("node__accelerator").order_by("item_index", "id"), to_attr="live_groups")


def instance_list(*, org, state: str | None = None):
    """The organization's instances, newest first, with their live node groups prefetched."""
    qs = Instance.objects.filter(organization=org).select_related("zone").prefetch_related(_live_groups())
    if state:
        qs = qs.filter(state__in=[s for s in state.split(",") if s])
    return qs.order_by("-created_at", "-id")


# The columns the API's instance body shows, in provisioning.api.rows.InstanceRow order; GROUP_BODY_COLUMNS in
# GroupRow order (the live node groups, fetched with the page as one JSON array per instance).
# The body_* columns are the page's per-row figures, read in the page's one statement on PostgreSQL (None elsewhere):
# cost so far, live groups, latest package period, notices' sources, volumes, datasets, waitlist position, the
# list's row count (limit/offset pages only) and the statement's clock; then the kept body (a body_cache.Kept) and
# its version (provisioning/body_cache.py) and, for a kept body needing only its cost and position, the whole body's
# text. On a kept row the columns only a built body reads (_BUILT_ONLY) are None.
INSTANCE_BODY_COLUMNS = (
    "id", "name", "kind", "state", "state_reason", "items", "policy", "zone_id", "zone__slug", "image", "images",
    "billing", "package_renewal", "waitlist", "created_at", "ready_at", "price_per_hour", "sla_deadline",
    "sla_event_id", "sla_settled_event_id", "sla_compensation", "organization_id", "body_cost", "body_groups",
    "body_package", "body_dark", "body_health", "body_volumes", "body_datasets", "body_position", "body_total",
    "body_now", "body_kept", "body_version", "body_text")
_EXTRA_COLUMNS = ("body_groups", "body_package", "body_dark", "body_health", "body_volumes", "body_datasets",
                  "body_position", "body_total")
# What the PostgreSQL statement selects: the JSON columns and figures travel in `body_extra`, one JSON array per
# row (one decode per row); _decoded turns it into the INSTANCE_BODY_COLUMNS tuple.
_PG_COLUMNS = (
    "id", "name", "kind", "state", "state_reason", "zone_id", "zone__slug", "image", "billing", "package_renewal",
    "waitlist", "created_at", "ready_at", "price_per_hour", "sla_deadline", "sla_event_id", "sla_settled_event_id",
    "sla_compensation", "organization_id", "body_cost", "body_extra", "body_position", "body_total", "body_now",
    "body_kept", "body_version", "body_package")
GROUP_BODY_COLUMNS = ("item_index", "accelerator", "card_indices", "state", "node_id", "node__hostname",
                      "node__ssh_host", "node__ssh_port", "ssh_port", "node__card_count", "node__accelerator__vendor")

# The page's per-row figures that need other tables' rows, computed once for the page's rows (not a subquery a row):
# its costs (billing.selectors.instance_cost_totals) and its waitlist positions. A position is the instance's
# place in its queue (waitlist_shape: kind, zone, accelerators and counts — or the policy), FIFO by waitlisted_at,
# created_at, id; PostgreSQL keeps each instance's shape in a generated column and the queues in a partial index
# (migration 0017), so only the queues of the page's waitlisted rows are walked, and none for a page without one.
_FIGURES = """, cardmix_meters AS ({meters}), cardmix_packages AS ({packages}),
cardmix_waitq AS (
  SELECT w.id, row_number() OVER (PARTITION BY w.waitlist_shape ORDER BY w.waitlisted_at, w.created_at, w.id) AS pos
  FROM provisioning_instance w
  WHERE w.state = 'waitlisted' AND w.waitlist_shape IN (
    SELECT p.page_shape FROM cardmix_page p WHERE p.state = 'waitlisted'))
SELECT {columns} FROM cardmix_page p
  LEFT JOIN cardmix_meters m ON m.instance_id = p.id
  LEFT JOIN cardmix_packages k ON k.instance_id = p.id
  LEFT JOIN cardmix_waitq q ON q.id = p.id
ORDER BY p.page_at {direction}, p.id {direction}"""
# The cost as bigint: the sums are numeric, which the driver would load as Decimal, a row at a time.
_PAGE_FIGURES = {"body_cost": "(COALESCE(m.total, 0) + COALESCE(k.total, 0))::bigint", "body_position": "q.pos",
                 "body_package": "CASE WHEN p.billing = 'monthly' THEN k.latest END"}
# The list's order, and its keyset for ?cursor= (core.pagination): newest first.
LIST_ORDER = ("-created_at", "-id")


def _body_rows_query(*, org_id, states, total=False, beyond=None, backwards=False, instance_id=None, kept_format="",
                     kept_texts=False):
    """The page query. `beyond`: (created_at, id) a cursor page starts after (before, when `backwards`);
    `instance_id`: that one instance only; `kept_format`: the body_cache format whose kept bodies it reads;
    `kept_texts`: a kept body's column holds its text, not the token of its row version (body_cache.kept_texts)."""
    from core.pagination import keyset_beyond
    from storage.selectors import instance_storage_expressions

    from .notices import instance_notice_expressions

    qs = Instance.objects.filter(organization_id=org_id)
    if states:
        qs = qs.filter(state__in=states)
    if instance_id is not None:
        qs = qs.filter(pk=instance_id)
    if beyond is not None:
        qs = qs.filter(keyset_beyond([("created_at", True, True), ("id", True, True)], [False, False], beyond,
                                     backwards))
    order = [f"{'' if c.startswith('-') else '-'}{c.lstrip('-')}" for c in LIST_ORDER] if backwards else LIST_ORDER
    qs = qs.order_by(*order)
    if connection.vendor != "postgresql":  # SQLite (development): the view reads the figures query by query
        return qs.annotate(body_cost=Value(None, output_field=BigIntegerField()),
                           **{c: Value(None, output_field=JSONField()) for c in _EXTRA_COLUMNS},
                           body_now=Value(None, output_field=TextField()),
                           body_kept=Value(None, output_field=TextField()),
                           body_version=Value(None, output_field=BigIntegerField()),
                           body_text=Value(None, output_field=TextField())).values_list(*INSTANCE_BODY_COLUMNS)
    pk = OuterRef("pk")
    groups = json_rows(NodeGroup.objects.live().filter(instance_id=pk), key="instance_id",
                       ordering=("item_index", "id"), columns=GROUP_BODY_COLUMNS)
    storage = instance_storage_expressions(pk, org_id=org_id)
    notices = instance_notice_expressions(pk)
    # count(*) with no GROUP BY (Count would group by the organization): a tenth of the statement less.
    count = (Instance.objects.filter(organization_id=org_id, **({"state__in": states} if states else {}))
             .order_by().annotate(n=Func(template="count(*)", output_field=BigIntegerField())).values("n"))
    # A kept body (provisioning/body_cache.py) of this process's format, if it is still current; what it is built
    # from is read only for the rows that have none (CASE evaluates the node groups' subquery only for those).
    qs = qs.annotate(kept_body=Case(When(body_cache__format=kept_format, then=F("body_cache__body")), default=None,
                                    output_field=TextField()),
                     body_version=F("body_cache__version"))
    missing = Q(kept_body__isnull=True)
    # Usually not the kept text but its row version's token: the process keeps the texts it has read
    # (body_cache.kept_texts), and 100 kept texts were a fifth of the statement's time, carried through its page,
    # joins and sort.
    qs = qs.annotate(body_kept=F("kept_body") if kept_texts else Case(
        When(~missing, then=RawSQL("provisioning_instancebody.xmin::text", ())), default=None, output_field=TextField()))
    # The row's JSON in one value (one decode per row): its own JSON columns, then the per-row figures.
    others = (notices["dark"], notices["health"], storage["volumes"], storage["datasets"])
    extra = Cast(Func(*[Case(When(missing, then=part), default=None) for part in (F("items"), F("policy"), F("images"),
                                                                                   groups)],
                      *others, function="json_build_array", output_field=JSONField()),
                 TextField())  # text JSON (json_build_array: jsonb would parse and re-sort it), parsed once by orjson
    # None for a kept body with no notices or storage (most rows): nothing to build, send or read. (A monthly
    # instance's package period comes with the page's figures: body_package.)
    plain = ~missing & IsNull(Coalesce(*others, output_field=JSONField()), True)
    extra = Case(When(plain, then=Value(None)), default=extra, output_field=TextField())
    # body_cost, body_position and body_package: filled in by the page's figures (_FIGURES, added by
    # _BodyRows._statement).
    qs = qs.annotate(
        body_cost=Value(None, BigIntegerField()), body_extra=extra,
        body_position=Value(None, BigIntegerField()), body_package=Value(None, TextField()),
        body_total=Subquery(count, output_field=BigIntegerField()) if total else Value(None, BigIntegerField()),
        page_shape=RawSQL("provisioning_instance.waitlist_shape", (), output_field=TextField()), page_at=F("created_at"))
    # Timestamps as the database's text: formatting that is cheaper than building datetimes (_api_time).
    # body_now: the database clock of this statement (what core.dbclock.db_now would answer), one query less; a
    # subquery, so it is formatted once, not once a row.
    qs = qs.annotate(body_now=RawSQL("(SELECT statement_timestamp()::text)", ()),
                     **{f"body_{c}": Cast(c, TextField()) for c in _TIME_COLUMNS})
    # A kept body shows these itself: they are sent only for the rows whose body is built (formatting ids, amounts
    # and times, and reading them, was a tenth of the statement).
    qs = qs.annotate(**{_pg_alias(c): Case(When(missing, then=F(f"body_{c}" if c in _TIME_COLUMNS else c)),
                                           default=None) for c in _BUILT_ONLY})
    return qs.values_list(*[_pg_alias(c) for c in _PG_COLUMNS], "page_shape", "page_at")


_TIME_COLUMNS = ("created_at", "ready_at", "sla_deadline")
# What only a body being built reads (_decoded, provisioning.api.rows.instance_body); a kept row's are NULL.
_BUILT_ONLY = ("name", "state_reason", "zone_id", "zone__slug", "image", "package_renewal", "waitlist", "ready_at",
               "price_per_hour", "sla_deadline", "sla_event_id", "sla_settled_event_id", "sla_compensation",
               "organization_id")


def _pg_alias(column: str) -> str:
    """The name a _PG_COLUMNS column has in the page statement."""
    if column in _BUILT_ONLY:
        return f"built_{column}"
    return f"body_{column}" if column in _TIME_COLUMNS else column
# Stand-ins for the parameters of the compiled statement: the organization, the states, a cursor's row, the page.
_ORG_SLOT = uuid.UUID(int=0xC0FFEE)
_AT_SLOT = datetime(1, 1, 1, 0, 0, 0, 7, tzinfo=UTC)
_ID_SLOT = uuid.UUID(int=0xC0FFEF)
_ONE_SLOT = uuid.UUID(int=0xC0FFF0)
_LIMIT_SLOT, _OFFSET_SLOT = "\x00limit-slot", "\x00offset-slot"
_CREATED = INSTANCE_BODY_COLUMNS.index("created_at")  # in the decoded rows
_TOTAL = INSTANCE_BODY_COLUMNS.index("body_total")
_PG_NOW = _PG_COLUMNS.index("body_now")


def _prepared_cursor():
    """A cursor (through Django's wrappers: query logging and counting still see it) whose statements PostgreSQL
    prepares once per connection: the page statement's many subqueries took as long to plan as to run. Needs
    session-level prepared statements (a direct connection, or PgBouncer ≥ 1.21 with max_prepared_statements)."""
    connection.ensure_connection()
    raw = connection.connection
    if not getattr(raw, "cardmix_prepared", False):
        # Django turns psycopg's preparing off (None), which also ignores prepare=True; a threshold nothing
        # reaches lets exactly the statements that ask be prepared (Django's own cursors never ask).
        if raw.prepare_threshold is None:
            raw.prepare_threshold = 2**31 - 1
        # PostgreSQL would re-plan the prepared statement on every call (its generic plan's estimate loses to the
        # custom plans'), which is the cost preparing is meant to save; the generic plan is as good for every
        # organization (the same index walk). The setting touches only prepared statements, i.e. these ones.
        raw.execute("SET plan_cache_mode = force_generic_plan")
        raw.cardmix_prepared = True
    return connection._prepare_cursor(_prepared_cursor_class()(raw))


@lru_cache(maxsize=1)
def _prepared_cursor_class():
    import psycopg
    from psycopg.types.string import TextLoader

    # A raw cursor: the statement comes with $n placeholders already (_numbered), because psycopg re-parses a
    # %s statement this long on every call (its cache stops at 4 kB).
    class Prepared(psycopg.RawCursor):
        def __init__(self, connection):
            super().__init__(connection)
            # Ids as their text: the body shows them as text, and building uuid.UUID objects (five a row) and
            # formatting them back was a tenth of the list's Python. _BodyRows.key makes the cursor's one a UUID.
            self.adapters.register_loader("uuid", TextLoader)

        def execute(self, query, params=None, *, prepare=None, binary=None):
            return super().execute(query, params, prepare=True, binary=binary)

    return Prepared


def _numbered(sql: str, n_params: int) -> str:
    """Django's %s placeholders as PostgreSQL's $1…$n (and %% as %), checked against the number of parameters."""
    import re

    count = iter(range(1, n_params + 1))
    out = re.sub(r"%[s%]", lambda m: "%" if m.group() == "%%" else f"${next(count)}", sql)
    if next(count, None) is not None:
        raise ValueError("fewer placeholders than parameters")
    return out


class _BodyRows:
    """The paginator's view of instance_list_rows on PostgreSQL (core.pagination's keyset protocol): the page, its
    per-row figures and (limit/offset) the list's count in one statement, through SQL compiled once per shape
    (building and compiling the annotated query cost more than running it). Rows are the tuples the queryset
    would return."""

    _compiled: dict = {}
    keys = (("created_at", True, True), ("id", True, True))

    def __init__(self, *, org_id, states, instance_id=None):
        self.org_id, self.states, self.instance_id = org_id, states, instance_id

    def count(self) -> int:
        qs = Instance.objects.filter(organization_id=self.org_id)
        return (qs.filter(state__in=self.states) if self.states else qs).count()

    def _statement(self, *, total: bool, cursor: str | None, kept_texts: bool = False):
        one = self.instance_id is not None
        kept_format = body_format()
        shape = (len(self.states), total, cursor, one, kept_format, kept_texts)
        if shape not in self._compiled:
            slots = [f"\x00state-slot-{i}" for i in range(len(self.states))]
            beyond = (_AT_SLOT, _ID_SLOT) if cursor else None
            page_sql, page_params = _body_rows_query(
                org_id=_ORG_SLOT, states=slots, total=total, beyond=beyond, backwards=cursor == "back",
                instance_id=_ONE_SLOT if one else None, kept_format=kept_format,
                kept_texts=kept_texts).query.sql_with_params()
            meters, packages = (qs.query.sql_with_params() for qs in instance_cost_totals(
                RawSQL("SELECT p.id FROM cardmix_page p", ())))
            columns = ", ".join(_PAGE_FIGURES.get(c, f'p."{_pg_alias(c)}"') for c in _PG_COLUMNS)
            sql = (f"WITH cardmix_page AS MATERIALIZED ({page_sql} LIMIT %s OFFSET %s)"
                   + _FIGURES.format(meters=meters[0], packages=packages[0], columns=columns,
                                     direction="ASC" if cursor == "back" else "DESC"))
            params = (*page_params, _LIMIT_SLOT, _OFFSET_SLOT, *meters[1], *packages[1])
            places = {_ORG_SLOT: 0, **{s: i + 1 for i, s in enumerate(slots)}, _AT_SLOT: len(slots) + 1,
                      _ID_SLOT: len(slots) + 2, _ONE_SLOT: len(slots) + 3, _LIMIT_SLOT: len(slots) + 4,
                      _OFFSET_SLOT: len(slots) + 5}
            # Which parameters are slots, and of which value: bound by position on every call.
            filled = tuple((i, places[p]) for i, p in enumerate(params)
                           if isinstance(p, (str, uuid.UUID, datetime)) and p in places)
            self._compiled[shape] = (_numbered(sql, len(params)), params, filled)
        return self._compiled[shape]

    def _run(self, *, total=False, cursor=None, beyond=(None, None), limit, offset=0, kept_texts=False) -> list:
        sql, params, filled = self._statement(total=total, cursor=cursor, kept_texts=kept_texts)
        values = (self.org_id, *self.states, *beyond, self.instance_id, limit, offset)
        bound = list(params)
        for i, value in filled:
            bound[i] = values[value]
        with _prepared_cursor() as cur:
            cur.execute(sql, bound)
            rows = cur.fetchall()
        now = datetime.fromisoformat(rows[0][_PG_NOW]) if rows else None  # the same for every row
        if kept_texts:
            kept = {r[0]: body_cut(r[_PG_KEPT]) for r in rows if r[_PG_KEPT] is not None}
        else:
            keys = [(r[0], r[_PG_VERSION], r[_PG_KEPT]) for r in rows if r[_PG_KEPT] is not None]
            texts = body_cache.kept_texts(keys) if keys else {}
            if len(texts) < len(keys):  # a kept body changed between the two reads: the page again, texts and all
                return self._run(total=total, cursor=cursor, beyond=beyond, limit=limit, offset=offset,
                                 kept_texts=True)
            kept = {key[0]: text for key, text in texts.items()}
        # A kept row with no notices, storage or package (most rows) needs only its cost and position spliced in.
        return [_decoded(r, now, None) if r[0] not in kept else
                _kept_plain(r, now, kept[r[0]]) if r[_PG_EXTRA] is None and r[_PG_PACKAGE] is None else
                _decoded(r, now, kept[r[0]]) for r in rows]

    def __getitem__(self, page: slice) -> list:
        return self._run(limit=page.stop - page.start, offset=page.start)

    def page(self, offset: int, limit: int) -> list:
        return self._run(limit=limit, offset=offset)

    def page_and_count(self, offset: int, limit: int) -> tuple[list, int]:
        rows = self._run(total=True, limit=limit, offset=offset)
        return rows, (rows[0][_TOTAL] if rows else self.count())

    def page_after(self, after, backwards: bool, limit: int) -> list:
        if after is None:
            return self._run(limit=limit, cursor="back" if backwards else None)
        return self._run(cursor="back" if backwards else "on", beyond=after, limit=limit)

    @staticmethod
    def key(row) -> tuple:
        return (_moment(row[_CREATED]), instance_pk(row[0]))


def _moment(value):
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def _api_time(text):
    """PostgreSQL's timestamptz text in UTC ("2026-11-20 10:30:15.0005+00") → the API's string, exactly as
    DRF renders the datetime ("2026-11-20T10:30:15.000500Z"); anything else becomes a datetime."""
    if text is None:
        return None
    if len(text) >= 22 and text.endswith("+00") and text[10] == " " and text[4] == "-":
        stamp = text[:-3]
        dot = stamp.find(".", 19)
        if dot == -1:
            return f"{stamp[:10]}T{stamp[11:]}Z"
        return f"{stamp[:10]}T{stamp[11:dot]}.{stamp[dot + 1:]:0<6}Z"
    return datetime.fromisoformat(text)


_PG_EXTRA = _PG_COLUMNS.index("body_extra")
_PG_KEPT = _PG_COLUMNS.index("body_kept")
_PG_VERSION = _PG_COLUMNS.index("body_version")
_PG_PACKAGE = _PG_COLUMNS.index("body_package")


def _kept_plain(r: tuple, now, kept: Kept) -> tuple:
    """_decoded for a row with a kept body and no package, notices or storage (body_extra and body_package NULL:
    most rows): the whole body's text (body_cache.plain_body_text), and what the cursor's key and the view read
    (the timestamp stays PostgreSQL's text: _moment reads it)."""
    (pk, _name, kind, state, _reason, _zone_id, _zone_slug, _image, billing, _renewal, _waitlist, created, _ready,
     _price, _deadline, _sla_event, _sla_settled, _sla_compensation, _org_id, cost, _extra, position, total, _, _kept,
     version, _package) = r
    return (pk, None, kind, state, None, None, None, None, None, None, None, billing, None, None, created, None, None,
            None, None, None, None, None, cost, [], None, None, None, None, None, position, total, now, kept, version,
            plain_body_text(kept, cost, position))


def _decoded(r: tuple, now, kept: Kept | None) -> tuple:
    """A row of the PostgreSQL statement (_PG_COLUMNS) as the INSTANCE_BODY_COLUMNS tuple, with its kept text."""
    (pk, name, kind, state, reason, zone_id, zone_slug, image, billing, renewal, waitlist, created, ready, price,
     deadline, sla_event, sla_settled, sla_compensation, org_id, cost, extra, position, total, _, _kept, version,
     package) = r
    # The database driver hands jsonb over as text (Django decodes it in the ORM's converters); orjson reads a page's
    # 100 of them in a quarter of json's time.
    items, policy, images, groups, dark, health, volumes, datasets = (
        orjson.loads(extra) if extra is not None else (None,) * 8)
    package = orjson.loads(package) if package is not None else None
    if kept is not None:  # a kept body (body_cache) shows its own times; the cursor's key needs created_at
        ready = deadline = None
    return (pk, name, kind, state, reason, items, policy, zone_id, zone_slug, image, images, billing, renewal,
            waitlist, _api_time(created), _api_time(ready), price, _api_time(deadline), sla_event, sla_settled,
            sla_compensation, org_id, cost, groups or [], package, dark, health, volumes, datasets, position, total,
            now, kept, version, None)


def instance_list_rows(*, org, state: str | None = None):
    """instance_list as tuples of INSTANCE_BODY_COLUMNS for the paginator: only the columns the API body shows,
    the zone joined and, on PostgreSQL, every per-row figure of the body read in the same statement (see
    INSTANCE_BODY_COLUMNS), so the page and its figures are one consistent snapshot and no model objects are
    built. Pages by limit/offset or by cursor (core.pagination)."""
    states = [s for s in state.split(",") if s] if state else []
    if connection.vendor == "postgresql":
        return _BodyRows(org_id=org.pk, states=states)
    return _body_rows_query(org_id=org.pk, states=states)


def instance_row(*, org, instance_id):
    """One instance as instance_list_rows gives it, its body's figures read in the same statement on PostgreSQL (an
    action's answer: one statement, not the detail's query per figure); None when the organization has no such
    instance."""
    instance_id = instance_pk(instance_id)
    if connection.vendor == "postgresql":
        rows = _BodyRows(org_id=org.pk, states=[], instance_id=instance_id).page(0, 1)
    else:
        rows = list(_body_rows_query(org_id=org.pk, states=[], instance_id=instance_id)[:1])
    return rows[0] if rows else None


def live_group_rows(instance_ids) -> dict:
    """{instance id: [GROUP_BODY_COLUMNS tuples]} of the live node groups, by item index, in one query."""
    by_instance: dict = {i: [] for i in instance_ids}
    rows = (NodeGroup.objects.live().filter(instance_id__in=list(by_instance))
            .order_by("item_index", "id").values_list("instance_id", *GROUP_BODY_COLUMNS))
    for instance_id, *columns in rows:
        by_instance[instance_id].append(columns)
    return by_instance


def instance_pk(instance_id) -> uuid.UUID:
    """An instance id from a URL as a UUID; 404 for a malformed one, as for another tenant's."""
    try:
        return instance_id if isinstance(instance_id, uuid.UUID) else uuid.UUID(str(instance_id))
    except ValueError:
        raise NotFoundError(gettext("No such instance.")) from None


def instance_get(*, org, instance_id) -> Instance:
    """One instance of the organization, or 404 (also for malformed ids and other tenants)."""
    try:
        return instance_list(org=org).get(pk=instance_pk(instance_id))
    except Instance.DoesNotExist:
        raise NotFoundError(gettext("No such instance.")) from None


def instance_names(*, org, ids) -> dict[str, str]:
    """{str(id): name} of the organization's instances among `ids` (other tenants' ids are left out); one query."""
    ids = {str(i) for i in ids if i}
    if not ids:
        return {}
    return {str(pk): name for pk, name in Instance.objects.filter(organization=org, pk__in=ids).values_list("pk", "name")}


def event_instances(*, org, event_ids) -> dict[str, tuple[str, str]]:
    """{str(event id): (str(instance id), instance name)} for the organization's instance events among `event_ids`
    (an SLA credit names its breach, the event of the create/start request); other tenants' are left out."""
    ids = set()
    for i in event_ids:
        try:
            ids.add(uuid.UUID(str(i)))
        except ValueError:
            continue
    if not ids:
        return {}
    rows = InstanceEvent.objects.filter(pk__in=ids, instance__organization=org).values_list(
        "pk", "instance_id", "instance__name")
    return {str(pk): (str(iid), name) for pk, iid, name in rows}


def instance_named(*, org, name: str) -> Instance | None:
    """The organization's newest instance called `name` that is not terminated (None when there is none)."""
    if not name:
        return None
    return (Instance.objects.filter(organization=org, name=name).exclude(state=S.TERMINATED)
            .order_by("-created_at", "-id").first())


def instance_events(*, instance: Instance):
    """The state history, oldest first."""
    return InstanceEvent.objects.filter(instance=instance).order_by("created_at", "id")


def instance_reports(*, instance: Instance):
    """Readiness reports, in the order they ran (not the platform's second passes after release)."""
    return (ReadinessReport.objects.filter(instance=instance).exclude(scope=ReportScope.SECOND_PASS)
            .select_related("node").order_by("id"))


def org_cards_in_use(*, org) -> int:
    """Cards with a live allocation held by the organization's instances (the quota's numerator)."""
    return CardAllocation.objects.live().filter(
        holder_id__in=Instance.objects.filter(organization=org).values("pk")).count()


def waitlist_nonempty() -> bool:
    """Whether any instance waits on the waitlist (one indexed read)."""
    return Instance.objects.filter(state=S.WAITLISTED).exists()


def waitlist_positions(instances) -> dict:
    """{instance id: 1-based position} among waitlisted instances of the same shape (FIFO by waitlisted_at)."""
    waiting = [i for i in instances if i.state == S.WAITLISTED]
    if not waiting:
        return {}
    shapes = {waitlist_shape(i) for i in waiting}
    queue = (Instance.objects.filter(state=S.WAITLISTED)
             .filter(Q(kind__in={s[0] for s in shapes}))
             .order_by("waitlisted_at", "created_at", "id")
             .only("id", "kind", "items", "policy", "zone_id", "waitlisted_at"))
    counters: dict = {}
    positions: dict = {}
    for other in queue:
        shape = waitlist_shape(other)
        if shape in shapes:
            counters[shape] = counters.get(shape, 0) + 1
            positions[other.pk] = counters[shape]
    return {i.pk: positions.get(i.pk) for i in waiting}


def waitlist_shape(instance: Instance) -> tuple:
    """Kind, accelerators and counts, zone — or the policy (SPEC §3 first come, first served)."""
    if instance.items:
        mix = tuple(sorted((it["accelerator"], int(it["count"])) for it in instance.items))
    else:
        p = instance.policy or {}
        mix = ("policy", p.get("total_cards"), tuple(sorted(p.get("compatible_vendors", []))),
               p.get("min_domestic_share"))
    return (instance.kind, mix, str(instance.zone_id or ""))


WAIT_SAMPLE_DAYS = 7


def waitlist_wait_estimate(*, instance: Instance) -> tuple[int | None, int]:
    """(median seconds, samples) that recent waitlisted requests of the same kind and card type waited before
    capacity woke them, over the last WAIT_SAMPLE_DAYS days, across the platform (durations only: nothing of another
    tenant is named); (None, 0) without any. One query."""
    from datetime import timedelta
    from statistics import median

    from django.db.models import OuterRef, Subquery

    since = db_now() - timedelta(days=WAIT_SAMPLE_DAYS)
    woken = InstanceEvent.objects.filter(reason="woken: capacity freed", created_at__gte=since,
                                         instance__kind=instance.kind)
    slugs = sorted({it["accelerator"] for it in instance.items or ()})
    if slugs and connection.vendor == "postgresql":  # jsonb containment; SQLite (development) matches on kind only
        for slug in slugs:
            woken = woken.filter(instance__items__contains=[{"accelerator": slug}])
    joined = (InstanceEvent.objects.filter(instance_id=OuterRef("instance_id"), to_state=S.WAITLISTED,
                                           created_at__lte=OuterRef("created_at")).order_by("-created_at", "-id"))
    rows = woken.annotate(waited_from=Subquery(joined.values("created_at")[:1])).values_list("created_at",
                                                                                             "waited_from")
    waits = [(at - start).total_seconds() for at, start in rows if start is not None]
    return (int(median(waits)), len(waits)) if waits else (None, 0)


def page_groups_and_costs(rows, *, now) -> tuple[dict, dict]:
    """({instance id: its live group rows}, {instance id: µCNY cost so far}) for a page of instance_list_rows:
    on PostgreSQL they came with the page (one statement), elsewhere two more queries."""
    if connection.vendor == "postgresql":
        return {r.id: r.body_groups for r in rows}, {r.id: r.body_cost for r in rows}
    ids = [r.id for r in rows]
    return live_group_rows(ids), instance_costs(ids, now=now)


def instance_groups_live(*, instance) -> list[NodeGroup]:
    """The instance's live node groups with node → zone and accelerator, by item and id (one query)."""
    return list(NodeGroup.objects.live().filter(instance=instance)
                .select_related("node__zone", "node__accelerator").order_by("item_index", "id"))


def instance_health_incidents(*, instance) -> list[dict]:
    """The instance's card health incidents (services/health.py), newest first, with what a failed card's time
    was not charged: the page's "Card health" table. One query."""
    return [{"id": str(i.pk), "class": i.klass, "card": f"{i.card.node.hostname} card {i.card.index}",
             "detail": i.detail, "started_at": i.started_at, "failed_at": i.failed_at, "ended_at": i.ended_at,
             "outcome": i.outcome, "credited": i.credited, "uncharged": i.uncharged}
            for i in (HealthIncident.objects.filter(instance=instance).select_related("card__node")
                      .order_by("-started_at"))]


def gateway_instances(*, org_ids, ref: str) -> list[Instance]:
    """The live (not terminated) instances of these organizations that `ref` names at the SSH gateway: by name,
    by short id (the first 8 hex digits of its id) or by its whole id; newest first, with the organization."""
    ref = (ref or "").strip()
    if not ref or not org_ids:
        return []
    match = Q(name=ref)
    try:
        match |= Q(pk=uuid.UUID(ref))
    except ValueError:
        if len(ref) == 8 and all(c in "0123456789abcdef" for c in ref.lower()):
            match |= Q(id_text__startswith=ref.lower())  # the first 8 digits: alike in both databases' text
    return list(Instance.objects.filter(organization_id__in=list(org_ids)).exclude(state=S.TERMINATED)
                .annotate(id_text=Cast("id", TextField())).filter(match).select_related("organization")
                .order_by("-created_at", "-id")[:5])


def instance_state_of(*, instance_id, org_id) -> str | None:
    """The instance's state now (None once it is gone): a gateway session's recheck."""
    return Instance.objects.filter(pk=instance_id, organization_id=org_id).values_list("state", flat=True).first()


# --- HTTP ports and the proxy (http_ports.py) ------------------------------------------------------

class ProxyTarget(NamedTuple):
    """Where the proxy sends one port's requests, and the JupyterLab token it adds (None: not Jupyter's)."""

    instance_id: str
    port: int
    host: str
    upstream_port: int
    jupyter_token: str | None
    tunnel: "Tunnel | None" = None  # set: reached through the instance's sshd (console/port_tunnels.py)


class Tunnel(NamedTuple):
    """The instance's sshd a port not published on its container is reached through, as the platform key."""

    host: str
    port: int
    group_id: int
    host_key: str
    private_key: str


def instance_ports(*, instance) -> list[dict]:
    """The instance's declared HTTP ports (its images', then its users'): `path` is the prefix the app is served
    under, `url` where a browser opens it in the operator's proxy mode."""
    images = images_named(instance.images.values())
    jport = http_ports.jupyter_port(images)
    return [{**p, "path": http_ports.port_path(instance.pk, p["port"]), "url": http_ports.port_url(instance.pk, p["port"]),
             "jupyter": p["port"] == jport}
            for p in http_ports.declared_ports(instance, images)]


def instance_jupyter_port(*, instance) -> int | None:
    return http_ports.jupyter_port(images_named(instance.images.values()))


def port_shares(*, instance):
    """The instance's share links, newest first (revoked and expired ones too: the list shows them)."""
    return PortShare.objects.filter(instance=instance).order_by("-created_at")


def port_share_get(*, org, instance_id, share_id) -> PortShare:
    """One share link of the organization's instance, or 404."""
    instance = instance_get(org=org, instance_id=instance_id)
    try:
        return PortShare.objects.get(instance=instance, pk=uuid.UUID(str(share_id)))
    except (PortShare.DoesNotExist, ValueError):
        raise NotFoundError(gettext("No such share link.")) from None


def port_share_active(*, instance_id, port: int, secret: str) -> PortShare | None:
    """The live (unrevoked, unexpired) share link of this instance's port that `secret` opens, or None: the
    secret itself is the credential, so no organization scopes it."""
    if not secret:
        return None
    try:
        instance_id = uuid.UUID(str(instance_id))
    except ValueError:
        return None
    return (PortShare.objects.filter(instance_id=instance_id, port=port, secret_hash=http_ports.secret_hash(secret),
                                     revoked_at__isnull=True, expires_at__gt=db_now())
            .select_related("instance").first())


def proxy_target(*, instance, port: int) -> ProxyTarget:
    """Where `port` of a running instance is reached; 404 for a port it does not declare, an instance not
    running, or a port its container did not publish."""
    declared = {p["port"]: p for p in instance_ports(instance=instance)}
    if instance.state != S.RUNNING or port not in declared:
        raise NotFoundError(gettext("No such port on a running instance."))
    head = _head_group(instance)
    where = http_ports.upstream(instance.kind, head, port) if head else None
    tunnel = None
    if where is None and head is not None and head.ssh_port:
        # Added after the container started (Docker cannot publish a port on a running container): through its sshd.
        from .platform_keys import platform_private_key

        endpoint = instance_ssh_endpoint(instance=instance)
        tunnel = Tunnel(endpoint.host, endpoint.port, endpoint.group_id, endpoint.host_key,
                        platform_private_key(instance))
        where = (endpoint.host, port)
    if where is None:
        raise NotFoundError(gettext("This port is not published on the instance's container; restart the instance."))
    token = http_ports.jupyter_token(instance.pk) if declared[port]["jupyter"] else None
    return ProxyTarget(str(instance.pk), port, where[0], where[1], token, tunnel)


def _head_group(instance):
    return (NodeGroup.objects.live().filter(instance=instance).select_related("node")
            .order_by("item_index", "id").first())


class SshEndpoint(NamedTuple):
    host: str
    port: int
    group_id: int
    host_key: str  # pinned ("" none yet: provisioning/host_keys.py)


def instance_ssh_endpoint(*, instance) -> SshEndpoint:
    """The sshd of the instance's head group (the web terminal's way in) and its host key; 404 when unplaced."""
    head = _head_group(instance)
    if head is None:
        raise NotFoundError(gettext("The instance is not placed on a node."))
    host = head.node.ssh_host or head.node.hostname
    own_network = instance.kind == InstanceKind.CONTAINER and head.ssh_port
    return SshEndpoint(host, head.ssh_port if own_network else head.node.ssh_port, head.pk, head.ssh_host_key)


def instance_state(*, instance_id) -> str | None:
    """The instance's state now (None: gone), for a connection that must end when it stops."""
    return Instance.objects.filter(pk=instance_id).values_list("state", flat=True).first()
