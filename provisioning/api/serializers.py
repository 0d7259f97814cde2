"""Instance, event, readiness and quote representations (SPEC §5)."""
from django.utils.translation import gettext
from rest_framework import serializers

from core.money import format_price_per_second, format_ucny
from core.serializers import StrictSerializer
from storage.api.serializers import AttachmentInputSerializer

from ..card_share import CardShare
from ..choices import BillingMode, InstanceKind, InstanceState, PackageRenewal
from ..placement.validation import MAX_POLICY_CARDS
from .rows import group_row_of, instance_body, row_of


class ItemSerializer(StrictSerializer):
    accelerator = serializers.SlugField(max_length=40)
    count = serializers.IntegerField(min_value=1, max_value=MAX_POLICY_CARDS)


class PolicySerializer(StrictSerializer):
    total_cards = serializers.IntegerField(min_value=1, max_value=MAX_POLICY_CARDS)
    compatible_vendors = serializers.ListField(child=serializers.CharField(max_length=30), min_length=1,
                                               max_length=10)
    min_domestic_share = serializers.FloatField(min_value=0.0, max_value=1.0, default=0.0)


class InstanceRequestSerializer(StrictSerializer):
    """The body of POST /quotes/ (and the placement part of POST /instances/)."""

    kind = serializers.ChoiceField(choices=InstanceKind.choices)
    items = ItemSerializer(many=True, required=False, allow_empty=False, max_length=16)
    policy = PolicySerializer(required=False)
    zone = serializers.SlugField(max_length=40, required=False, allow_blank=True)
    # Image slugs carry dots ("pytorch-2.3-cuda12.3"), so not a SlugField.
    image = serializers.RegexField(r"^[A-Za-z0-9._-]+$", max_length=60, required=False, allow_blank=True)
    images = serializers.DictField(child=serializers.RegexField(r"^[A-Za-z0-9._-]+$", max_length=60),
                                   required=False)
    billing = serializers.ChoiceField(choices=BillingMode.choices, default=BillingMode.ON_DEMAND)
    # storage: volumes attached at create ([{volume, mount_path?}]) and library entries mounted read-only at
    # /datasets/<slug>; they pin the instance to their zone.
    volumes = AttachmentInputSerializer(many=True, required=False, max_length=16)
    datasets = serializers.ListField(child=serializers.SlugField(max_length=60), required=False, max_length=16)

    def validate(self, attrs):
        volumes = [str(v["volume"]) for v in attrs.get("volumes") or []]
        if len(set(volumes)) != len(volumes):
            raise serializers.ValidationError({"volumes": [gettext("A volume is listed twice.")]})
        if bool(attrs.get("items")) == bool(attrs.get("policy")):
            raise serializers.ValidationError({"items": [gettext("Give either items or a policy (not both).")]})
        if attrs.get("image") and attrs.get("images"):
            raise serializers.ValidationError({"images": [gettext("Give either image or images (not both).")]})
        return attrs


class InstanceCreateSerializer(InstanceRequestSerializer):
    """POST /instances/."""

    name = serializers.CharField(max_length=100, required=False, default="instance")
    ssh_key_ids = serializers.ListField(child=serializers.UUIDField(), required=False, default=list, max_length=20)
    package_renewal = serializers.ChoiceField(choices=PackageRenewal.choices, default=PackageRenewal.STOP)
    waitlist = serializers.BooleanField(default=False)

    def validate(self, attrs):
        attrs = super().validate(attrs)
        if not attrs.get("image") and not attrs.get("images"):
            raise serializers.ValidationError({"image": [gettext("Name an image (or images per vendor for a hybrid).")]})
        return attrs


class QuoteSerializer(InstanceRequestSerializer):
    """POST /quotes/: a create body (SPEC §5), so a client may quote exactly what it will post; the fields that
    do not change the price are accepted and not used. Anything else is an unknown field (400)."""

    name = serializers.CharField(max_length=100, required=False)
    ssh_key_ids = serializers.ListField(child=serializers.UUIDField(), required=False, max_length=20)
    package_renewal = serializers.ChoiceField(choices=PackageRenewal.choices, required=False)
    waitlist = serializers.BooleanField(required=False)


class PackageRenewalSerializer(StrictSerializer):
    package_renewal = serializers.ChoiceField(choices=PackageRenewal.choices)


class StateFilterSerializer(StrictSerializer):
    state = serializers.MultipleChoiceField(choices=InstanceState.choices, required=False)


class InstanceSerializer(serializers.Serializer):
    """The instance body of the detail endpoints and the console. Context: costs, positions, now, packages.

    The body itself is built by rows.instance_body, as the list's are, from this instance's rows.
    """

    def to_representation(self, instance):
        ctx = self.context
        groups = getattr(instance, "live_groups", None)
        if groups is None:
            groups = list(instance.groups.live().select_related("node__accelerator"))
        return instance_body(row_of(instance), [group_row_of(g) for g in groups], costs=ctx.get("costs", {}),
                             positions=ctx.get("positions", {}), now=ctx.get("now"),
                             packages=ctx.get("packages", {}), notices=ctx.get("notices", {}),
                             storage=ctx.get("storage", {}))


class InstanceEventSerializer(serializers.Serializer):
    def to_representation(self, event):
        return {"id": str(event.pk), "from": event.from_state or None, "to": event.to_state,
                "reason": event.reason, "request_id": event.request_id,
                "actor": str(event.actor_id) if event.actor_id else None, "at": event.created_at}


class ReadinessReportSerializer(serializers.Serializer):
    def to_representation(self, r):
        return {"node": r.node.hostname, "nodes": r.nodes, "scope": r.scope, "tool": r.tool, "command": r.command,
                "attempt": r.attempt, "cards": r.cards, "busbw_gbps": r.busbw_largest_gbps,
                "busbw_peak_gbps": r.busbw_peak_gbps, "floor_gbps": r.floor_gbps, "passed": r.passed,
                "rows": r.rows, "errors": r.errors, "exit_code": r.exit_code, "raw_output": r.raw_output,
                "topology": r.topology, "started_at": r.started_at, "finished_at": r.finished_at}


def _share_body(row) -> dict:
    """The CPUs and memory an item's cards bring (provisioning/card_share.py): null until placed, or when a node's
    size is unknown."""
    share = CardShare(row.get("millicpus"), row.get("memory_mib"))
    return {"cpus": share.cpus, "memory_mib": share.memory_mib, "memory_gib": share.memory_gib}


def quote_body(quote, storage: dict | None = None) -> dict:
    """POST /quotes/ answer; `storage` (storage_port.quote_storage): the volumes' price, added to the total."""
    storage = storage or {"volumes": [], "datasets": [], "price_per_hour": 0}
    total = quote.price_per_hour + storage["price_per_hour"]
    return {
        "volumes": [{**v, "price_per_hour": format_ucny(v["price_per_hour"])} for v in storage["volumes"]],
        "datasets": storage["datasets"],
        "volumes_price_per_hour": format_ucny(storage["price_per_hour"]),
        "total_price_per_hour": format_ucny(total),
        "total_price_per_second": format_price_per_second(total),
        "items": [{"accelerator": r["accelerator"], "count": r["count"],
                   "price_per_card_hour": format_ucny(r["price_per_card_hour"]), **_share_body(r),
                   "busbw_gbps": r["busbw_gbps"]}
                  for r in quote.items],
        "price_per_hour": format_ucny(quote.price_per_hour),
        "price_per_second": format_price_per_second(quote.price_per_hour),
        "available": quote.available,
        "domestic_share": quote.domestic_share,
        "missing": quote.missing,
    }
