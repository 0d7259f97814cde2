"""Limit/offset pagination with the {count, next, previous, results} envelope (default 50, max 500)."""
from rest_framework.pagination import LimitOffsetPagination


class LimitOffsetEnvelopePagination(LimitOffsetPagination):
    """SPEC §5 list envelope."""

    default_limit = 50
    max_limit = 500
