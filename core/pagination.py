"""The list envelope {count, next, previous, results} (SPEC §5): limit/offset, or an opaque cursor (`?cursor=`).

`?limit=` (default 50, max 500) and `?offset=` page as before. `?cursor=` (empty: the first page) pages by keyset
instead: each page is read from where the last one ended in the list's own order (e.g. `-created_at, -id`, always
ending in a unique column), so a page costs the same at row 10 and at row 10 million, rows added meanwhile are
neither skipped nor repeated, and `count` is null (counting a large list costs as much as reading it).
The cursor in the `next`/`previous` links is signed for the organization, the user and the list it came from: a
changed, truncated or foreign cursor is a 400 (`validation_error` on `cursor`) that says nothing about its rows.
"""
from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from urllib import parse

from django.core import signing
from django.core.exceptions import FieldDoesNotExist
from django.db.models import Q
from django.db.models.expressions import OrderBy
from django.utils.translation import gettext, gettext_lazy
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response

CURSOR_MESSAGE = gettext_lazy("Not a cursor of this list: follow the next or previous link as it was given.")
_SALT = "cardmix.pagination.cursor"


def _bad_cursor():
    return ValidationError({"cursor": [str(CURSOR_MESSAGE)]})


# --- cursor values: typed so a datetime comes back a datetime (JSON has no such type) -----------------

def _pack(value):
    if value is None:
        return ["n"]
    if isinstance(value, bool):
        return ["b", value]
    if isinstance(value, int):
        return ["i", value]
    if isinstance(value, dt.datetime):
        return ["t", value.isoformat()]
    if isinstance(value, dt.date):
        return ["d", value.isoformat()]
    if isinstance(value, uuid.UUID):
        return ["u", str(value)]
    if isinstance(value, Decimal):
        return ["m", str(value)]
    return ["s", str(value)]


def _unpack(packed):
    tag, *rest = packed
    if tag == "n":
        return None
    value = rest[0]
    return {"b": bool, "i": int, "t": dt.datetime.fromisoformat, "d": dt.date.fromisoformat, "u": uuid.UUID,
            "m": Decimal, "s": str}[tag](value)


# --- keysets: what a list must offer to be read by cursor -------------------------------------------

class QuerySetKeyset:
    """A queryset read by keyset on its own ordering (plus the primary key, when its ordering does not end in a
    unique column). Plain and related field names are read off the rows; an ordering expression is annotated."""

    def __init__(self, queryset):
        ordering = list(queryset.query.order_by or queryset.model._meta.ordering or ())
        keys, annotations = [], {}
        for i, item in enumerate(ordering):
            if isinstance(item, str):
                desc = item.startswith("-")
                name = item.lstrip("-")
                keys.append((queryset.model._meta.pk.name if name == "pk" else name, desc, True))
            else:
                expr, desc = (item.expression, item.descending) if isinstance(item, OrderBy) else (item, False)
                annotations[f"cursor_k{i}"] = expr
                keys.append((f"cursor_k{i}", desc, False))
        pk = queryset.model._meta.pk.name
        if not keys or keys[-1][0] not in (pk, "id"):
            keys.append((pk, keys[-1][1] if keys else False, True))
        self.queryset = queryset.annotate(**annotations) if annotations else queryset
        self.keys = keys  # (name, descending, is a field path)
        self.queryset = self.queryset.order_by(*[("-" if d else "") + n for n, d, _ in keys])
        self._nullable = [self._is_nullable(n) if field else False for n, _, field in keys]

    def _is_nullable(self, path: str) -> bool:
        model = self.queryset.model
        try:
            for part in path.split("__"):
                field = model._meta.get_field(part)
                if field.null:
                    return True
                model = field.related_model or model
        except FieldDoesNotExist:
            return True
        return False

    def key(self, row) -> tuple:
        values = []
        for name, _, _ in self.keys:
            if isinstance(row, tuple) and not hasattr(row, "_fields"):  # values_list(): by the fields' order
                values.append(row[self.queryset._fields.index(name)])
                continue
            value = row
            for part in name.split("__"):
                value = value[part] if isinstance(value, dict) else getattr(value, part)
            values.append(value)
        return tuple(values)

    def count(self) -> int:
        return self.queryset.count()

    def page(self, offset: int, limit: int) -> list:
        return list(self.queryset[offset:offset + limit])

    def page_after(self, after: tuple | None, backwards: bool, limit: int) -> list:
        """Up to `limit` rows beyond `after` (None: from the start), in list order or, backwards, reversed."""
        qs = self.queryset
        if backwards:
            qs = qs.order_by(*[("" if d else "-") + n for n, d, _ in self.keys])
        if after is not None:
            qs = qs.filter(keyset_beyond(self.keys, self._nullable, after, backwards))
        return list(qs[:limit])


def keyset_beyond(keys, nullable, after, backwards) -> Q:
    """Rows strictly beyond `after` in the order `keys` gives (reversed when `backwards`), with PostgreSQL's NULL
    placement (NULLs last ascending, first descending): (k1 > v1) or (k1 = v1 and k2 > v2) or …"""
    total = Q(pk__in=[])
    equal = Q()
    for (name, desc, _), value, null_ok in zip(keys, after, nullable, strict=True):
        larger = desc == backwards  # moving towards larger values
        if value is None:
            beyond = Q(pk__in=[]) if larger else Q(**{f"{name}__isnull": False})
            same = Q(**{f"{name}__isnull": True})
        else:
            beyond = Q(**{f"{name}__{'gt' if larger else 'lt'}": value})
            if null_ok and larger:
                beyond |= Q(**{f"{name}__isnull": True})
            same = Q(**{name: value})
        total |= equal & beyond
        equal &= same
    first, first_desc, _ = keys[0]
    if after[0] is not None and not nullable[0]:
        # A bound on the leading column alone, so PostgreSQL reads the list's index from the cursor onwards.
        larger = first_desc == backwards
        total &= Q(**{f"{first}__{'gte' if larger else 'lte'}": after[0]})
    return total


class SequenceKeyset:
    """A list built in Python (e.g. statement months) read by cursor on the row's place in it: such lists are
    small and rebuilt per request, so the place is the key."""

    keys = (("place", False, False),)

    def __init__(self, rows):
        self.rows = list(rows)
        self._places = {id(row): i for i, row in enumerate(self.rows)}

    def key(self, row) -> tuple:
        return (self._places[id(row)],)

    def count(self) -> int:
        return len(self.rows)

    def page(self, offset: int, limit: int) -> list:
        return self.rows[offset:offset + limit]

    def page_after(self, after, backwards: bool, limit: int) -> list:
        if not backwards:
            start = 0 if after is None else after[0] + 1
            return self.rows[start:start + limit]
        end = len(self.rows) if after is None else after[0]
        return self.rows[max(0, end - limit):max(0, end)][::-1]


def keyset_of(queryset):
    """The keyset view of what a view hands the paginator: a QuerySetKeyset for a queryset, a SequenceKeyset for a
    list."""
    return QuerySetKeyset(queryset) if hasattr(queryset, "query") else SequenceKeyset(queryset)


# --- the paginator ---------------------------------------------------------------------------------

def query_link(url: str, changes: dict) -> str:
    """`url` with its query parameters changed (None: removed), sorted and encoded as DRF's replace_query_param and
    remove_query_param write them: their links, in one parse of the URL instead of one a parameter (the links were
    a tenth of a list page's own work)."""
    scheme, netloc, path, query, fragment = parse.urlsplit(url)
    params = parse.parse_qs(query, keep_blank_values=True)
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = [str(value)]
    return parse.urlunsplit((scheme, netloc, path, parse.urlencode(sorted(params.items()), doseq=True), fragment))


class EnvelopePagination(LimitOffsetPagination):
    """SPEC §5 list envelope, by limit/offset or by cursor."""

    default_limit = 50
    max_limit = 500
    cursor_query_param = "cursor"
    cursor_query_description = ("Page by cursor instead of offset: empty for the first page, then the `next` or "
                                "`previous` link as given (opaque; `count` is null on cursor pages).")

    def paginate_queryset(self, queryset, request, view=None):
        # Bad input → 400 (SPEC §5), instead of DRF silently falling back to the defaults.
        errors = {}
        for param in (self.limit_query_param, self.offset_query_param):
            values = request.query_params.getlist(param)
            if len(values) > 1 or (values and not (values[0].isascii() and values[0].isdigit() and len(values[0]) <= 15)):
                errors[param] = [gettext("Must be given once, as a non-negative integer below 10^15.")]
            elif values and param == self.limit_query_param and int(values[0]) == 0:
                errors[param] = [gettext("Must be at least 1.")]
        cursors = request.query_params.getlist(self.cursor_query_param)
        if len(cursors) > 1:
            errors[self.cursor_query_param] = [gettext("Must be given once.")]
        elif cursors and self.offset_query_param in request.query_params:
            errors[self.offset_query_param] = [gettext("Give either offset or cursor, not both.")]
        if errors:
            raise ValidationError(errors)
        self.request = request
        self.keyset = keyset_of(queryset)
        self.cursor_mode = bool(cursors)
        if self.cursor_mode:
            return self._paginate_cursor(cursors[0], request)
        self.limit = self.get_limit(request)
        self.offset = self.get_offset(request)
        self.count = self.keyset.count()
        if self.count == 0 or self.offset > self.count:
            return []
        return self.keyset.page(self.offset, self.limit)

    # --- cursor mode ---

    def _scope(self, request) -> str:
        org = getattr(request, "org", None)
        user = getattr(request, "user", None)
        return ":".join([_SALT, str(getattr(org, "pk", "")), str(getattr(user, "pk", "") or ""), request.path])

    def _encode(self, key: tuple, backwards: bool) -> str:
        payload = {"k": [_pack(v) for v in key], **({"b": 1} if backwards else {})}
        return signing.Signer(salt=self._scope(self.request)).sign_object(payload, compress=True)

    def _decode(self, token: str) -> tuple[tuple, bool]:
        try:
            payload = signing.Signer(salt=self._scope(self.request)).unsign_object(token)
            key = tuple(_unpack(v) for v in payload["k"])
            backwards = bool(payload.get("b"))
        except (signing.BadSignature, ValueError, TypeError, KeyError, IndexError, AttributeError):
            raise _bad_cursor() from None
        if len(key) != len(self.keyset.keys):
            raise _bad_cursor()
        return key, backwards

    def _paginate_cursor(self, token: str, request):
        self.limit = self.get_limit(request)
        self.count = None
        after, backwards = self._decode(token) if token else (None, False)
        rows = self.keyset.page_after(after, backwards, self.limit + 1)
        more = len(rows) > self.limit
        rows = rows[:self.limit]
        if backwards:
            rows.reverse()
            self._next = self._encode(self.keyset.key(rows[-1]), False) if rows else None
            self._previous = self._encode(self.keyset.key(rows[0]), True) if rows and more else None
        else:
            self._next = self._encode(self.keyset.key(rows[-1]), False) if rows and more else None
            self._previous = self._encode(self.keyset.key(rows[0]), True) if rows and after is not None else None
        return rows

    def _cursor_link(self, token):
        if token is None:
            return None
        return query_link(self.request.build_absolute_uri(), {self.offset_query_param: None,
                                                              self.cursor_query_param: token})

    def get_next_link(self):
        if self.cursor_mode:
            return self._cursor_link(self._next)
        if self.offset + self.limit >= self.count:
            return None
        return query_link(self.request.build_absolute_uri(), {self.limit_query_param: self.limit,
                                                              self.offset_query_param: self.offset + self.limit})

    def get_previous_link(self):
        if self.cursor_mode:
            return self._cursor_link(self._previous)
        if self.offset <= 0:
            return None
        offset = self.offset - self.limit
        return query_link(self.request.build_absolute_uri(), {self.limit_query_param: self.limit,
                                                              self.offset_query_param: offset if offset > 0 else None})

    def get_paginated_response(self, data):
        return Response({"count": self.count, "next": self.get_next_link(), "previous": self.get_previous_link(),
                         "results": data})

    def get_paginated_response_schema(self, schema):
        out = super().get_paginated_response_schema(schema)
        out["properties"]["count"] = {**out["properties"]["count"], "nullable": True,
                                      "description": "Rows in the list; null on cursor pages."}
        return out

    def get_schema_operation_parameters(self, view):
        return [*super().get_schema_operation_parameters(view), {
            "name": self.cursor_query_param, "required": False, "in": "query",
            "description": self.cursor_query_description, "schema": {"type": "string"}}]


# The name the views and settings import.
LimitOffsetEnvelopePagination = EnvelopePagination


def list_parameters():
    """The paging query parameters for the schema of a list an APIView pages itself (extend_schema(parameters=…));
    generic list views get them from the paginator."""
    from drf_spectacular.utils import OpenApiParameter

    return [OpenApiParameter("limit", int, description="Number of results to return per page (default 50, max 500)."),
            OpenApiParameter("offset", int, description="The initial index from which to return the results."),
            OpenApiParameter("cursor", str, description=EnvelopePagination.cursor_query_description)]
