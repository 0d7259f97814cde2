"""Agent API payloads: heartbeat report in, commands out, results in."""
from rest_framework import serializers

from ..models import AgentCommand
from ..services import OUTPUT_LIMIT


class DeviceSerializer(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, max_value=255)
    name = serializers.CharField(max_length=200, allow_blank=True, required=False, default="")
    uuid = serializers.CharField(max_length=200, allow_blank=True, required=False, default="")
    memory_total_mib = serializers.IntegerField(required=False, allow_null=True, default=None)
    driver_version = serializers.CharField(max_length=100, allow_blank=True, required=False, default="")
    temperature_c = serializers.IntegerField(required=False, allow_null=True, default=None)
    utilization_pct = serializers.IntegerField(required=False, allow_null=True, default=None)


class HeartbeatSerializer(serializers.Serializer):
    """What the agent sees on its host."""

    agent_version = serializers.CharField(max_length=40)
    hostname = serializers.CharField(max_length=200)
    runtime = serializers.ChoiceField(choices=["docker", "process"])
    vendor = serializers.CharField(max_length=20, allow_blank=True, required=False, default="")
    devices = DeviceSerializer(many=True, required=False, default=list)
    driver_versions = serializers.DictField(child=serializers.CharField(max_length=200, allow_blank=True),
                                            required=False, default=dict)
    health = serializers.CharField(max_length=20, required=False, default="ok")
    smi_output = serializers.CharField(max_length=64 * 1024, allow_blank=True, required=False, default="")
    containers = serializers.ListField(child=serializers.CharField(max_length=200), required=False, default=list)
    errors = serializers.ListField(child=serializers.CharField(max_length=1000), required=False, default=list)


class CommandSerializer(serializers.ModelSerializer):
    class Meta:
        model = AgentCommand
        fields = ["id", "kind", "payload", "deadline"]


class ResultSerializer(serializers.Serializer):
    """What the node printed for one command: text and exit code (no verdict)."""

    exit_code = serializers.IntegerField(min_value=-255, max_value=255)
    output = serializers.CharField(max_length=OUTPUT_LIMIT, allow_blank=True, trim_whitespace=False)
    duration_s = serializers.FloatField(min_value=0, required=False, allow_null=True, default=None)
    meta = serializers.DictField(required=False, default=dict)
