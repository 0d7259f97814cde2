"""Querysets shared by the apps' models."""
from django.db import models


class ReleasableQuerySet(models.QuerySet):
    """Rows that end by setting `released_at` (card allocations, node groups) instead of being deleted."""

    def live(self):
        """The rows not released yet: what a card or an instance holds now (partial indexes serve this)."""
        return self.filter(released_at__isnull=True)
