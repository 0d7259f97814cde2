"""Querysets shared by the apps' models, and the output field of the list statements' JSON."""
from django.db import models
from django.db.models import JSONField


class ReleasableQuerySet(models.QuerySet):
    """Rows that end by setting `released_at` (card allocations, node groups) instead of being deleted."""

    def live(self):
        """The rows not released yet: what a card or an instance holds now (partial indexes serve this)."""
        return self.filter(released_at__isnull=True)


class ParsedJSONField(JSONField):
    """The output field of an expression of PostgreSQL's text JSON (`json`, not jsonb): the driver parses it
    itself, so Django must not parse it again."""

    def get_db_converters(self, connection):
        return []
