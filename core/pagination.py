"""Limit/offset pagination with the {count, next, previous, results} envelope (default 50, max 500)."""
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination


class LimitOffsetEnvelopePagination(LimitOffsetPagination):
    """SPEC §5 list envelope."""

    default_limit = 50
    max_limit = 500

    def paginate_queryset(self, queryset, request, view=None):
        # Bad input → 400 (SPEC §5), instead of DRF silently falling back to the defaults.
        errors = {}
        for param in (self.limit_query_param, self.offset_query_param):
            values = request.query_params.getlist(param)
            if len(values) > 1 or (values and not (values[0].isascii() and values[0].isdigit() and len(values[0]) <= 15)):
                errors[param] = ["Must be given once, as a non-negative integer below 10^15."]
            elif values and param == self.limit_query_param and int(values[0]) == 0:
                errors[param] = ["Must be at least 1."]
        if errors:
            raise ValidationError(errors)
        return super().paginate_queryset(queryset, request, view)
