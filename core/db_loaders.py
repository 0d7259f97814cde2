"""What the database driver builds from PostgreSQL's values, in C where Django's defaults are Python.

Django loads every timestamptz through a Python subclass of psycopg's loader (to set the tzinfo it wants), about
12 µs a value: the instance list reads ~300 a page. When the session's time zone is UTC, which is what Django sets
with USE_TZ and no TIME_ZONE of the database's own, psycopg's C loader already gives datetimes whose tzinfo is
datetime.timezone.utc — the same objects — so it is registered instead. The `json` type (what json_agg and
json_build_array give) is parsed with orjson; jsonb stays Django's (JSONField parses it itself).
"""
import datetime

import orjson
from psycopg import adapters
from psycopg.adapt import Loader
from psycopg.types.json import JsonLoader

_C_TIMESTAMPTZ = adapters.get_loader(adapters.types["timestamptz"].oid, 0)  # psycopg_binary's; final in C


class UtcTimestamptzLoader(Loader):
    """psycopg's C timestamptz loader, with the `timezone` attribute Django's create_cursor compares with its own."""

    timezone = datetime.UTC

    def __init__(self, oid, context=None):
        super().__init__(oid, context)
        self._c = _C_TIMESTAMPTZ(oid, context)

    def load(self, data):
        return self._c.load(data)


class OrjsonLoader(JsonLoader):
    """The `json` type through orjson (json.loads takes three times as long)."""

    _loads = orjson.loads


def connection_loaders(sender, connection, **kwargs):
    """connection_created: the faster loaders on a new (or pooled) connection."""
    if connection.timezone is not datetime.UTC or connection.timezone_name != "UTC":
        return  # another session time zone: Django's loader, which sets the tzinfo it wants
    raw = connection.connection
    raw.adapters.register_loader("timestamptz", UtcTimestamptzLoader)
    raw.adapters.register_loader("json", OrjsonLoader)
