"""The API's input serializers refuse fields they do not know (SPEC §5: 400 validation_error naming each).

Without it DRF drops an unknown key silently, so a misspelt option (`volumes` before storage existed, `imgae`)
created something else than asked. Every write serializer derives from StrictSerializer or StrictModelSerializer
(or mixes StrictFieldsMixin in); nested ones too, so `items.0.colour` is named with its path.
"""
from collections.abc import Mapping

from django.utils.translation import gettext_lazy
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

UNKNOWN_FIELD = gettext_lazy("Unknown field.")


class StrictFieldsMixin:
    """Refuse keys of the body that are not fields of the serializer, together with its other errors."""

    def to_internal_value(self, data):
        unknown = sorted(str(k) for k in data if k not in self.fields) if isinstance(data, Mapping) else []
        try:
            value = super().to_internal_value(data)
        except ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                raise ValidationError({**exc.detail, **{k: [str(UNKNOWN_FIELD)] for k in unknown}}) from exc
            raise
        if unknown:
            raise ValidationError({k: [str(UNKNOWN_FIELD)] for k in unknown})
        return value


class StrictSerializer(StrictFieldsMixin, serializers.Serializer):
    pass


class StrictModelSerializer(StrictFieldsMixin, serializers.ModelSerializer):
    pass


class EmptyBodySerializer(StrictSerializer):
    """The body of an action that takes none (stop, start, delete…): any key in it is an unknown field."""


def body_refuse_unknown(request) -> None:
    """400 validation_error naming each key of a body the endpoint does not read (actions without a body)."""
    if isinstance(request.data, Mapping) and request.data:
        EmptyBodySerializer(data=request.data).is_valid(raise_exception=True)
