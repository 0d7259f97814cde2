"""Webhook API bodies and representations."""
from django.utils.translation import gettext_lazy
from rest_framework import serializers

from core.serializers import StrictSerializer

from ..events import EVENT_TYPES


class EndpointSerializer(serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    url = serializers.CharField(read_only=True)
    description = serializers.CharField(read_only=True)
    event_types = serializers.ListField(child=serializers.CharField(), read_only=True)
    enabled = serializers.BooleanField(read_only=True)
    disabled_reason = serializers.CharField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)


class EndpointCreatedSerializer(EndpointSerializer):
    secret = serializers.CharField(read_only=True, help_text=gettext_lazy("The signing secret (whsec_…), in this response only."))


class EndpointCreateSerializer(StrictSerializer):
    url = serializers.CharField(max_length=500)
    event_types = serializers.ListField(child=serializers.ChoiceField(choices=list(EVENT_TYPES)), allow_empty=False)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)


class EndpointUpdateSerializer(StrictSerializer):
    url = serializers.CharField(max_length=500, required=False)
    event_types = serializers.ListField(child=serializers.ChoiceField(choices=list(EVENT_TYPES)), allow_empty=False,
                                        required=False)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False)


class SecretSerializer(serializers.Serializer):
    secret = serializers.CharField(read_only=True)


class AttemptSerializer(serializers.Serializer):
    attempted_at = serializers.DateTimeField()
    status_code = serializers.IntegerField(allow_null=True)
    response_body = serializers.CharField()
    error = serializers.CharField()
    duration_ms = serializers.IntegerField()
    succeeded = serializers.BooleanField()


class DeliverySerializer(serializers.Serializer):
    id = serializers.UUIDField()
    event_id = serializers.CharField()
    event_type = serializers.CharField(source="event.type")
    payload = serializers.JSONField(source="event.payload")
    state = serializers.CharField()
    attempts = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    attempt_rows = AttemptSerializer(many=True, source="attempt_rows.all")


class EventTypeSerializer(serializers.Serializer):
    type = serializers.CharField()
    description = serializers.CharField()
