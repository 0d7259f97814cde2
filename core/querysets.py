"""Querysets shared by the apps' models, and the JSON expressions of the list statements."""
from django.contrib.postgres.aggregates.mixins import OrderableAggMixin
from django.db import models
from django.db.models import Aggregate, F, Func, JSONField, Subquery, TextField, Value
from django.db.models.functions import Cast


class ReleasableQuerySet(models.QuerySet):
    """Rows that end by setting `released_at` (card allocations, node groups) instead of being deleted."""

    def live(self):
        """The rows not released yet: what a card or an instance holds now (partial indexes serve this)."""
        return self.filter(released_at__isnull=True)


class JSONAgg(OrderableAggMixin, Aggregate):
    """PostgreSQL's `json_agg` (text JSON; JSONBAgg is jsonb), with an optional order_by."""

    function = "JSON_AGG"
    template = "%(function)s(%(distinct)s%(expressions)s %(order_by)s)"
    output_field = JSONField()


def json_object(**fields):
    """JSONObject as PostgreSQL's `json_build_object`: text JSON in the fields' order. The list's statement builds a
    page of these; jsonb would parse and re-sort each on the way (a sixth of the statement's time)."""
    args = []
    for key, value in fields.items():
        args += [Cast(Value(key), TextField()), F(value) if isinstance(value, str) else value]
    return Func(*args, function="JSON_BUILD_OBJECT", output_field=JSONField())


def json_array(*columns):
    """PostgreSQL's `json_build_array` of the columns (names or expressions), as text JSON."""
    return Func(*[F(c) if isinstance(c, str) else c for c in columns], function="JSON_BUILD_ARRAY",
                output_field=JSONField())


def json_rows(queryset, *, key: str, ordering=(), columns=(), **fields):
    """A correlated subquery (PostgreSQL) of `queryset`'s rows as one JSON array of objects with `fields` (or of
    arrays of `columns`, when given: no keys to write and read), in `ordering` (NULL when there is none): a list
    reads a page's related rows in its own statement, one value per row to decode. `key` is the column the outer
    query correlates on (the subquery groups by it). Text JSON (`json_agg`, `json_object`), not jsonb: nothing
    compares or indexes it, the reader parses it once."""
    element = json_array(*columns) if columns else json_object(**fields)
    rows = (queryset.order_by().values(key)
            .annotate(j=JSONAgg(element, order_by=ordering)).values("j"))
    return Subquery(rows, output_field=JSONField())
