"""Agent API payloads: heartbeat report in, commands out, results in."""
import json

from django.utils.translation import gettext
from rest_framework import serializers

from inventory.custom_images import pull_auth_unseal

from ..models import AgentCommand
from ..services import OUTPUT_LIMIT

# What one node can sensibly report; a larger body is a broken or hostile agent.
MAX_DEVICES = 64
MAX_CONTAINERS = 1024
MAX_ERRORS = 50
MAX_VOLUMES = 4096
MAX_DRIVER_VERSIONS = 32
MAX_HEALTH_SECTIONS = 16
META_MAX_BYTES = 64 * 1024  # of a result's meta, as JSON
META_MAX_DEPTH = 16


class JsonSafe:
    """Refuses what PostgreSQL jsonb cannot store (NUL in any key or string) and bodies past size/depth limits."""

    def __init__(self, *, max_bytes: int, max_depth: int):
        self.max_bytes, self.max_depth = max_bytes, max_depth

    def __call__(self, value):
        self._walk(value, 0)
        if len(json.dumps(value, ensure_ascii=False).encode()) > self.max_bytes:
            raise serializers.ValidationError(gettext('Must be at most %(max_bytes)s bytes as JSON.') % {'max_bytes': self.max_bytes})

    def _walk(self, value, depth):
        if depth > self.max_depth:
            raise serializers.ValidationError(gettext('Must be nested at most %(max_depth)s levels deep.') % {'max_depth': self.max_depth})
        if isinstance(value, str):
            if "\x00" in value:
                raise serializers.ValidationError(gettext("Null characters are not allowed."))
        elif isinstance(value, dict):
            for key, item in value.items():
                if "\x00" in key:
                    raise serializers.ValidationError(gettext("Null characters are not allowed in keys."))
                self._walk(item, depth + 1)
        elif isinstance(value, list):
            for item in value:
                self._walk(item, depth + 1)


class DeviceSerializer(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, max_value=255)
    name = serializers.CharField(max_length=200, allow_blank=True, required=False, default="")
    uuid = serializers.CharField(max_length=200, allow_blank=True, required=False, default="")
    memory_total_mib = serializers.IntegerField(required=False, allow_null=True, default=None)
    driver_version = serializers.CharField(max_length=100, allow_blank=True, required=False, default="")
    temperature_c = serializers.IntegerField(required=False, allow_null=True, default=None)
    utilization_pct = serializers.IntegerField(required=False, allow_null=True, default=None)


class VolumeUsageSerializer(serializers.Serializer):
    """A volume mounted on the node: its usage and size as the node sees them (agents from 1.5.0)."""

    id = serializers.CharField(max_length=100)
    used_bytes = serializers.IntegerField(min_value=0, max_value=2**63 - 1)
    size_bytes = serializers.IntegerField(min_value=0, max_value=2**63 - 1, required=False, allow_null=True,
                                          default=None)
    quota = serializers.ChoiceField(choices=["xfs", "ext4", "ceph", "none"], required=False, default="none")
    over_quota = serializers.BooleanField(required=False, default=False)


class HealthSectionSerializer(serializers.Serializer):
    """One tool's output in a heartbeat's health probe (its tail: the agent sends at most 16 KiB)."""

    output = serializers.CharField(max_length=32 * 1024, allow_blank=True, trim_whitespace=False)
    exit_code = serializers.IntegerField(min_value=-255, max_value=255)


class HeartbeatSerializer(serializers.Serializer):
    """What the agent sees on its host (CharFields refuse NUL themselves; dict keys need JsonSafe)."""

    agent_version = serializers.CharField(max_length=40)
    hostname = serializers.CharField(max_length=200)
    runtime = serializers.ChoiceField(choices=["docker", "process"])
    vendor = serializers.CharField(max_length=20, allow_blank=True, required=False, default="")
    devices = DeviceSerializer(many=True, required=False, default=list, max_length=MAX_DEVICES)
    driver_versions = serializers.DictField(child=serializers.CharField(max_length=200, allow_blank=True),
                                            required=False, default=dict,
                                            validators=[JsonSafe(max_bytes=16 * 1024, max_depth=1)])
    health = serializers.CharField(max_length=20, required=False, default="ok")
    smi_output = serializers.CharField(max_length=64 * 1024, allow_blank=True, required=False, default="")
    containers = serializers.ListField(child=serializers.CharField(max_length=200), required=False, default=list,
                                       max_length=MAX_CONTAINERS)
    errors = serializers.ListField(child=serializers.CharField(max_length=1000), required=False, default=list,
                                   max_length=MAX_ERRORS)
    volumes = VolumeUsageSerializer(many=True, required=False, default=list, max_length=MAX_VOLUMES)
    # The raw health outputs (agents from 1.6.0), {section: {"output", "exit_code"}}: parsed by hardware/health; a
    # section it does not know is logged as unparsed, never refused (the heartbeat must land).
    health_probe = serializers.DictField(child=HealthSectionSerializer(), required=False, default=dict)
    # The host's size, divided among its containers in proportion to cards (older agents send none).
    cpus = serializers.IntegerField(min_value=1, max_value=65_535, required=False, allow_null=True, default=None)
    memory_mib = serializers.IntegerField(min_value=1, max_value=2**31 - 1, required=False, allow_null=True,
                                          default=None)

    def validate_health_probe(self, value):
        if len(value) > MAX_HEALTH_SECTIONS:
            raise serializers.ValidationError(gettext('Ensure this field has no more than %(MAX_HEALTH_SECTIONS)s elements.') % {'MAX_HEALTH_SECTIONS': MAX_HEALTH_SECTIONS})
        if any(len(key) > 40 or "\x00" in key for key in value):
            raise serializers.ValidationError(gettext("Keys must be at most 40 characters, without null characters."))
        return value

    def validate_driver_versions(self, value):
        if len(value) > MAX_DRIVER_VERSIONS:
            raise serializers.ValidationError(gettext('Ensure this field has no more than %(MAX_DRIVER_VERSIONS)s elements.') % {'MAX_DRIVER_VERSIONS': MAX_DRIVER_VERSIONS})
        if any(len(key) > 100 for key in value):
            raise serializers.ValidationError(gettext("Keys must be at most 100 characters."))
        return value


class CommandSerializer(serializers.ModelSerializer):
    """A command as handed out without a lease (agents before 1.3.0): exactly what they always got.

    A registry login (a private image's pull, a save's push) is kept sealed in the row and opened here, for the
    node's own agent only (inventory/custom_images.py)."""

    class Meta:
        model = AgentCommand
        fields = ["id", "kind", "payload", "deadline"]

    def to_representation(self, instance):
        body = super().to_representation(instance)
        payload = body.get("payload")
        if isinstance(payload, dict) and isinstance(payload.get("registry_auth"), dict):
            body["payload"] = {**payload, "registry_auth": pull_auth_unseal(payload["registry_auth"])}
        return body


class LeasedCommandSerializer(CommandSerializer):
    """A command handed out under a lease: the agent acknowledges its start with `lease` before `lease_until`."""

    lease = serializers.UUIDField(source="lease_id")

    class Meta(CommandSerializer.Meta):
        fields = [*CommandSerializer.Meta.fields, "lease", "lease_until"]


class StartSerializer(serializers.Serializer):
    """The agent's start acknowledgement: the lease it was handed the command under."""

    lease = serializers.UUIDField(required=False, allow_null=True, default=None)


class ResultSerializer(serializers.Serializer):
    """What the node printed for one command: text and exit code (no verdict)."""

    exit_code = serializers.IntegerField(min_value=-255, max_value=255)
    output = serializers.CharField(max_length=OUTPUT_LIMIT, allow_blank=True, trim_whitespace=False)
    duration_s = serializers.FloatField(min_value=0, required=False, allow_null=True, default=None)
    meta = serializers.DictField(required=False, default=dict,
                                 validators=[JsonSafe(max_bytes=META_MAX_BYTES, max_depth=META_MAX_DEPTH)])
    # Sent with an answer for a command the agent did not run: the hand-out it answers for (agents from 1.3.1).
    lease = serializers.UUIDField(required=False, allow_null=True, default=None)


class EnrollSerializer(serializers.Serializer):
    """A freshly imaged node's one-time enrollment secret (`cmxe_…`, from the deploy path)."""

    secret = serializers.CharField(max_length=200, trim_whitespace=True)
