"""DRF fields for the API's money conventions."""
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from rest_framework import serializers

from .money import MoneyError, format_ucny, parse_cny


class MoneyField(serializers.Field):
    """Integer µCNY inside, a 6-decimal string in JSON."""

    default_error_messages = {"invalid": "{message}"}

    def __init__(self, *, allow_negative=False, max_decimals=6, **kwargs):
        self.allow_negative = allow_negative
        self.max_decimals = max_decimals
        super().__init__(**kwargs)

    def to_representation(self, value):
        return format_ucny(int(value))

    def to_internal_value(self, data):
        try:
            return parse_cny(data, allow_negative=self.allow_negative, max_decimals=self.max_decimals)
        except MoneyError as exc:
            self.fail("invalid", message=str(exc))


class MoneyFieldExtension(OpenApiSerializerFieldExtension):
    """Describes MoneyField as a string in the OpenAPI schema (drf-spectacular is a dependency)."""

    target_class = "core.fields.MoneyField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "string", "pattern": r"^-?\d+\.\d{1,6}$", "example": "100.000000"}
