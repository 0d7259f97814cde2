"""The API's JSON renderer (DEFAULT_RENDERER_CLASSES): DRF's, through orjson. The instance list (100 bodies a page,
the busiest read) spent a fifth of its CPU in the standard library's encoder."""
import orjson
from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

_FALLBACK = JSONEncoder()
# As DRF writes them (JavaScript-safe), which orjson leaves raw.
_SEPARATORS = ((b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))
# UTC_Z: datetimes and dates as DRF's encoder writes them (isoformat, "+00:00" as "Z"), in C — the instance list
# has three a row (tests/core/test_renderers.py holds the two to the same text). orjson 3.13 writes some times of
# day wrongly (00:00:00.010000 as "00:00:00.10000"): the API returns none.
_OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_NON_STR_KEYS


def json_bytes(data) -> bytes:
    """`data` as the API writes it (compact)."""
    out = orjson.dumps(data, default=_FALLBACK.default, option=_OPTIONS)  # NON_STR_KEYS: validation details by index
    # Both start with the byte 0xE2, which most answers lack: one memchr scan (a two-byte search was a twentieth of
    # the instance list's CPU).
    if b"\xe2" in out and b"\xe2\x80" in out:
        for raw, escaped in _SEPARATORS:
            out = out.replace(raw, escaped)
    return out


def json_text(data) -> str:
    return json_bytes(data).decode()


class FastJSONRenderer(JSONRenderer):
    """JSONRenderer's compact output for the types the API returns, byte for byte but for the spelling of some floats
    (orjson writes 0.00006103515625 where json writes 6.103515625e-05: the same value); what orjson does not know (lazy
    translations, Decimal, timedeltas, querysets…) goes through DRF's own encoder."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if data is None:
            return b""
        if self.get_indent(accepted_media_type, renderer_context or {}) is not None:  # ?indent / browsable: rare
            return super().render(orjson.loads(json_bytes(data)), accepted_media_type, renderer_context)
        return json_bytes(data)
