"""The API's JSON parser: hostile bodies are a 400, never a 500."""
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class SafeJSONParser(JSONParser):
    """DRF's parser catches ValueError only; a body nested deeper than Python's recursion limit raises
    RecursionError, which would otherwise escape as a 500."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply.") from None
