"""core.renderers.FastJSONRenderer (orjson) writes the JSON DRF's JSONRenderer writes: the same bytes but for the
spelling of some floats."""
import datetime
import decimal
import json
import uuid

from django.utils.translation import gettext_lazy
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.renderers import JSONRenderer

from core.renderers import FastJSONRenderer

SCALARS = (st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 63 - 1) | st.text()
           | st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15))
JSONISH = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


def _both(data):
    return FastJSONRenderer().render(data), JSONRenderer().render(data)


@given(JSONISH)
def test_the_same_json_as_drf_and_the_same_bytes_without_floats(data):
    """orjson spells some floats otherwise (0.00006103515625 for 6.103515625e-05): the same value, other bytes."""
    fast, drf = _both(data)
    if data is None:  # no body at all, as DRF renders None
        assert fast == drf == b""
        return
    assert json.loads(fast) == json.loads(drf)
    if not _has_float(data):
        assert fast == drf


def _has_float(data) -> bool:
    if isinstance(data, float):
        return True
    values = data.values() if isinstance(data, dict) else data if isinstance(data, list) else ()
    return any(_has_float(v) for v in values)


def test_the_same_bytes_for_the_types_drf_encodes_itself():
    data = {"lazy": gettext_lazy("Not found."), "decimal": decimal.Decimal("1.900000"), "id": uuid.UUID(int=7),
            "at": datetime.datetime(2026, 12, 3, 16, 0, 0, 123456, tzinfo=datetime.UTC),
            "day": datetime.date(2026, 12, 3), "separators": "a\u2028b\u2029c", "cjk": "实名认证",
            "tuple": (1, "x"), "delta": datetime.timedelta(seconds=90),
            "details": {"devices": {0: {"index": ["Ensure this value is greater than or equal to 0."]}}}}
    fast, drf = _both(data)
    assert fast == drf
    assert FastJSONRenderer().render(None) == b""


ZONES = st.sampled_from([None, datetime.UTC, datetime.timezone(datetime.timedelta(hours=8)),
                         datetime.timezone(datetime.timedelta(hours=-5, minutes=-30))])


@given(st.datetimes(timezones=ZONES) | st.dates())
def test_datetimes_and_dates_as_drf_writes_them(value):
    """orjson writes them itself (OPT_UTC_Z): the same text as DRF's encoder, microseconds and offsets included."""
    fast, drf = _both({"at": value})
    assert fast == drf
