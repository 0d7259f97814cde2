"""Querysets shared by the apps' models."""
from django.db import models


class ReleasableQuerySet(models.QuerySet):
    """Rows that end by setting `released_at` (card allocations, node groups) instead of being deleted."""

    def live(self):
        """The rows not released yet: what a card or an instance holds now (partial indexes serve this)."""
        return self.filter(released_at__isnull=True)


def json_rows(queryset, *, key: str, ordering=(), **fields):
    """A correlated subquery (PostgreSQL) of `queryset`'s rows as one JSON array of objects with `fields`, in
    `ordering` (NULL when there is none): a list reads a page's related rows in its own statement, one value per
    row to decode. `key` is the column the outer query correlates on (the subquery groups by it)."""
    from django.contrib.postgres.aggregates import JSONBAgg
    from django.db.models import JSONField, Subquery
    from django.db.models.functions import JSONObject

    rows = (queryset.order_by().values(key)
            .annotate(j=JSONBAgg(JSONObject(**fields), order_by=ordering)).values("j"))
    return Subquery(rows, output_field=JSONField())
