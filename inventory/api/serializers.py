"""Serializers of the catalog API and the operators' admin API."""
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.validators import UniqueValidator

from core.fields import MoneyField
from core.serializers import StrictModelSerializer, StrictSerializer

from ..choices import CardHealth, NodeState, Vendor
from ..models import Accelerator, Card, Image, Node, Price, Zone
from ..node_import import DRIVERS, MAX_CARDS_PER_NODE
from ..selectors import price_pair


class SlugRef(serializers.SlugRelatedField):
    """A slug naming a row; a NUL byte (which PostgreSQL refuses in any query) is an invalid slug, not a 500."""

    def to_internal_value(self, data):
        if isinstance(data, str) and "\x00" in data:
            self.fail("invalid")
        return super().to_internal_value(data)


class AcceleratorSerializer(serializers.ModelSerializer):
    """SPEC §5 catalog row; expects `with_current_prices` annotations and a `stock` dict in context."""

    price_per_card_hour = serializers.SerializerMethodField()
    monthly_price_per_card_hour = serializers.SerializerMethodField()
    available_cards = serializers.SerializerMethodField()
    total_cards = serializers.SerializerMethodField()

    class Meta:
        model = Accelerator
        fields = ["slug", "name", "vendor", "domestic", "memory_gb", "collective", "price_per_card_hour",
                  "monthly_price_per_card_hour", "orderable", "available_cards", "total_cards"]

    def _prices(self, obj):
        return price_pair(obj.on_demand_ucny, obj.monthly_set_ucny) if obj.orderable else None

    def get_price_per_card_hour(self, obj) -> str | None:
        pair = self._prices(obj)
        return MoneyField().to_representation(pair[0]) if pair else None

    def get_monthly_price_per_card_hour(self, obj) -> str | None:
        pair = self._prices(obj)
        return MoneyField().to_representation(pair[1]) if pair else None

    def get_available_cards(self, obj) -> int:
        return self.context["stock"][obj.slug]["available_cards"]

    def get_total_cards(self, obj) -> int:
        return self.context["stock"][obj.slug]["total_cards"]


class ZoneStockSerializer(serializers.Serializer):
    """Live stock of one accelerator in a zone (counted as `/accelerators/` counts it)."""

    accelerator = serializers.CharField(help_text=gettext_lazy("The accelerator's slug."))
    available_cards = serializers.IntegerField()
    total_cards = serializers.IntegerField()


class ZoneSerializer(serializers.ModelSerializer):
    """A zone (one fabric) with its stock per accelerator; expects a `stock` dict (selectors.zone_stock) in
    context."""

    stock = serializers.SerializerMethodField()

    class Meta:
        model = Zone
        fields = ["slug", "name", "fabric_kind", "fabric_gbps", "inter_node_floor_gbps", "stock"]

    @extend_schema_field(ZoneStockSerializer(many=True))
    def get_stock(self, obj):
        return self.context["stock"].get(obj.slug, [])


class ImageSerializer(serializers.ModelSerializer):
    """SPEC §5 image row."""

    slug = serializers.CharField(read_only=True)  # slugs contain dots (pytorch-2.3-cuda12.3): not a SlugField
    class Meta:
        model = Image
        fields = ["slug", "name", "description", "vendors", "http_ports", "jupyter_port"]


class NodeSerializer(serializers.ModelSerializer):
    """A node as operators see it; BMC credentials are never shown, only whether a reference is set."""

    zone = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    accelerator = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    has_bmc_credentials = serializers.SerializerMethodField()
    cards_free = serializers.IntegerField(read_only=True)
    cards_allocated = serializers.IntegerField(read_only=True)
    cards_failed = serializers.IntegerField(read_only=True)

    class Meta:
        model = Node
        fields = ["id", "hostname", "zone", "accelerator", "card_count", "state", "state_reason",
                  "state_changed_at", "driver", "ssh_host", "ssh_port", "bmc_address", "has_bmc_credentials",
                  "cards_free", "cards_allocated", "cards_failed", "created_at"]
        read_only_fields = fields

    def get_has_bmc_credentials(self, obj) -> bool:
        return bool(obj.bmc_credentials_ref)


class NodeCreateSerializer(StrictSerializer):
    """Input of POST /admin-api/nodes/."""

    hostname = serializers.CharField(max_length=200)
    zone = SlugRef(slug_field="slug", queryset=Zone.objects.all())
    accelerator = SlugRef(slug_field="slug", queryset=Accelerator.objects.all())
    card_count = serializers.IntegerField(min_value=1, max_value=MAX_CARDS_PER_NODE, default=8)
    driver = serializers.ChoiceField(choices=DRIVERS, default="simulated")
    ssh_host = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    ssh_port = serializers.IntegerField(min_value=1, max_value=65535, default=22)
    bmc_address = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
    bmc_credentials_ref = serializers.CharField(max_length=200, required=False, allow_blank=True, default="",
                                                write_only=True)
    state = serializers.ChoiceField(choices=[NodeState.AVAILABLE, NodeState.MAINTENANCE], default=NodeState.AVAILABLE)

    def validate_hostname(self, value):
        return value.strip().lower()


class NodeUpdateSerializer(StrictSerializer):
    """Input of PATCH /admin-api/nodes/{id}/ (connection details only; states go through actions)."""

    driver = serializers.ChoiceField(choices=DRIVERS, required=False)
    ssh_host = serializers.CharField(max_length=200, required=False, allow_blank=True)
    ssh_port = serializers.IntegerField(min_value=1, max_value=65535, required=False)
    bmc_address = serializers.CharField(max_length=300, required=False, allow_blank=True)
    bmc_credentials_ref = serializers.CharField(max_length=200, required=False, allow_blank=True, write_only=True)

    def validate(self, attrs):
        unknown = set(self.initial_data) - set(self.fields)
        if unknown:
            raise serializers.ValidationError({f: ["This field cannot be changed here."] for f in sorted(unknown)})
        if not attrs:
            raise serializers.ValidationError({"non_field_errors": ["Nothing to change."]})
        return attrs


class ReasonSerializer(StrictSerializer):
    """Input of the node state actions."""

    reason = serializers.CharField(max_length=500)


class CardHealthSerializer(ReasonSerializer):
    """Input of the card health action: the finding and why."""

    health = serializers.ChoiceField(choices=CardHealth.choices)


class CardSerializer(serializers.ModelSerializer):
    """A card with its current holder (from the `live_*` annotations)."""

    hostname = serializers.CharField(source="node.hostname", read_only=True)
    accelerator = serializers.CharField(source="node.accelerator.slug", read_only=True)
    holder = serializers.SerializerMethodField()

    class Meta:
        model = Card
        fields = ["id", "node", "hostname", "accelerator", "index", "health", "holder"]
        read_only_fields = fields

    def get_holder(self, obj) -> dict | None:
        if obj.live_holder_id is None:
            return None
        return {"kind": obj.live_holder_kind, "id": str(obj.live_holder_id),
                "allocated_at": serializers.DateTimeField().to_representation(obj.live_allocated_at)}


class PriceSerializer(StrictModelSerializer):
    """A price row; money as 6-decimal strings; `monthly_price_per_card_hour` null = the default discount."""

    accelerator = SlugRef(slug_field="slug", queryset=Accelerator.objects.all())
    price_per_card_hour = MoneyField(source="on_demand_per_card_hour")
    monthly_price_per_card_hour = MoneyField(source="monthly_per_card_hour", allow_null=True, required=False)
    effective_from = serializers.DateTimeField(required=False)

    class Meta:
        model = Price
        fields = ["id", "accelerator", "price_per_card_hour", "monthly_price_per_card_hour", "effective_from"]
        read_only_fields = ["id"]
        validators: list = []  # effective_from defaults to now; price_create maps a clash to a field error


class ImagePortSerializer(StrictSerializer):
    """One HTTP port an image serves (reached through the platform's proxy)."""

    port = serializers.IntegerField(min_value=1, max_value=65535)
    name = serializers.CharField(max_length=40, allow_blank=True, default="")


class ImageAdminSerializer(StrictModelSerializer):
    """An image as operators edit it; `jupyter_port` is where it starts JupyterLab with the platform's token."""

    # Slugs contain dots (pytorch-2.3-cuda12.3), which a SlugField refuses (and its schema pattern denies).
    slug = serializers.RegexField(r"^[-a-zA-Z0-9_.]+$", max_length=60,
                                  validators=[UniqueValidator(queryset=Image.objects.all())])
    vendors = serializers.ListField(child=serializers.ChoiceField(choices=Vendor.values), allow_empty=False)
    http_ports = ImagePortSerializer(many=True, required=False, max_length=8)
    jupyter_port = serializers.IntegerField(min_value=1, max_value=65535, required=False, allow_null=True)

    class Meta:
        model = Image
        fields = ["id", "slug", "name", "description", "vendors", "active", "http_ports", "jupyter_port"]
        read_only_fields = ["id"]
