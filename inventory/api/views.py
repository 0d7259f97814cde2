"""The catalog API (every role) and the operators' admin API (staff only)."""
import django_filters
from django.db.models import Q
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.idempotency import idempotent
from tenancy.permissions import IsStaff, require

from .. import selectors, services
from ..choices import CardHealth, NodeState
from ..models import Card, Image, Node
from . import serializers as s

ZONE_PARAMETER = OpenApiParameter(
    "zone", str, description="A zone's slug (GET /zones/): stock counts only that zone's cards. An unknown zone "
                             "is a 400 validation_error.")


@extend_schema_view(list=extend_schema(parameters=[ZONE_PARAMETER]),
                    retrieve=extend_schema(parameters=[ZONE_PARAMETER]))
class AcceleratorViewSet(viewsets.ReadOnlyModelViewSet):
    """GET /accelerators/ — the catalog with current prices and live stock (three queries, any size); `?zone=`
    counts one zone's stock."""

    permission_classes = [require(read="catalog")]
    serializer_class = s.AcceleratorSerializer
    lookup_field = "slug"
    filter_backends: list = []

    def get_queryset(self):
        return selectors.with_current_prices(selectors.accelerator_list())

    def get_serializer_context(self):
        context = super().get_serializer_context()
        slug = self.request.query_params.get("zone") if self.request is not None else None
        zone = selectors.zone_for_filter(slug) if slug else None
        context["stock"] = selectors.stock_by_accelerator(zone=zone)
        return context


class ZoneViewSet(viewsets.ReadOnlyModelViewSet):
    """GET /zones/ — the zones (one fabric each) with live stock per accelerator; the same queries for any number
    of zones. Catalog data: the same for every tenant, like /accelerators/."""

    permission_classes = [require(read="catalog")]
    serializer_class = s.ZoneSerializer
    lookup_field = "slug"
    filter_backends: list = []

    def get_queryset(self):
        return selectors.zone_list()

    def get_serializer_context(self):
        context = super().get_serializer_context()
        context["stock"] = selectors.zone_stock()
        return context


class ImageViewSet(viewsets.ReadOnlyModelViewSet):
    """GET /images/ — active images and the vendors they run on."""

    permission_classes = [require(read="catalog")]
    serializer_class = s.ImageSerializer
    lookup_field = "slug"
    lookup_value_regex = r"[^/]+"  # image slugs contain dots (pytorch-2.3-cuda12.3)
    filter_backends: list = []

    def get_queryset(self):
        qs = selectors.image_list(active_only=True)
        vendor = self.request.query_params.get("vendor")
        if not vendor or self.action != "list":  # ?vendor= narrows the list, never hides one image
            return qs
        # JSON containment is not portable to SQLite; filter the few images in Python, keep a queryset.
        return qs.filter(pk__in=[i.pk for i in qs if vendor in i.vendors])


class NodeFilter(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=NodeState.choices)
    zone = django_filters.CharFilter(field_name="zone__slug")
    accelerator = django_filters.CharFilter(field_name="accelerator__slug")
    driver = django_filters.CharFilter()
    q = django_filters.CharFilter(method="search", label=gettext_lazy("hostname or SSH host contains"))

    class Meta:
        model = Node
        fields = ["state", "zone", "accelerator", "driver"]

    def search(self, queryset, name, value):
        return queryset.filter(Q(hostname__icontains=value) | Q(ssh_host__icontains=value))


class NodeAdminViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                       mixins.UpdateModelMixin, viewsets.GenericViewSet):
    """/admin-api/nodes/: list (filters state, zone, accelerator, driver, q), create, PATCH, state actions."""

    permission_classes = [IsStaff]
    serializer_class = s.NodeSerializer
    filterset_class = NodeFilter
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self):
        return selectors.node_list()

    def _body(self, node, code=status.HTTP_200_OK):
        return Response(s.NodeSerializer(self.get_queryset().get(pk=node.pk)).data, status=code)

    @idempotent()
    def create(self, request, *args, **kwargs):
        data = s.NodeCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        node = services.node_create(**data.validated_data, actor=request.user, request=request)
        return self._body(node, status.HTTP_201_CREATED)

    def partial_update(self, request, *args, **kwargs):
        node = self.get_object()
        data = s.NodeUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.node_update(node=node, actor=request.user, request=request, **data.validated_data)
        return self._body(node)

    def update(self, request, *args, **kwargs):
        return self.partial_update(request, *args, **kwargs)

    def _set_state(self, request, verb):
        node = self.get_object()
        data = s.ReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.node_set_state(node=node, state=verb, reason=data.validated_data["reason"], actor=request.user,
                                request=request)
        return self._body(node)

    @action(detail=True, methods=["post"])
    def drain(self, request, pk=None):
        return self._set_state(request, "drain")

    @action(detail=True, methods=["post"])
    def undrain(self, request, pk=None):
        return self._set_state(request, "undrain")

    @action(detail=True, methods=["post"])
    def maintenance(self, request, pk=None):
        return self._set_state(request, "maintenance")

    @action(detail=True, methods=["post"])
    def quarantine(self, request, pk=None):
        return self._set_state(request, "quarantine")

    @action(detail=True, methods=["post"])
    def retire(self, request, pk=None):
        return self._set_state(request, "retire")


class CardFilter(django_filters.FilterSet):
    node = django_filters.UUIDFilter(field_name="node_id")
    health = django_filters.ChoiceFilter(choices=CardHealth.choices)
    zone = django_filters.CharFilter(field_name="node__zone__slug")
    accelerator = django_filters.CharFilter(field_name="node__accelerator__slug")
    allocated = django_filters.BooleanFilter(method="by_allocated")

    class Meta:
        model = Card
        fields = ["node", "health", "zone", "accelerator"]

    def by_allocated(self, queryset, name, value):
        held = selectors.card_held()
        return queryset.filter(held if value else ~held)


class CardAdminViewSet(viewsets.ReadOnlyModelViewSet):
    """/admin-api/cards/: cards with their current holder; POST {id}/health/ marks one ok, degraded or failed."""

    permission_classes = [IsStaff]
    serializer_class = s.CardSerializer
    filterset_class = CardFilter

    def get_queryset(self):
        return selectors.cards_with_live_holder()

    @extend_schema(request=s.CardHealthSerializer, responses={200: s.CardSerializer})
    @action(detail=True, methods=["post"])
    def health(self, request, pk=None):
        card = self.get_object()
        data = s.CardHealthSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.cards_set_health(card_ids=[card.pk], health=data.validated_data["health"],
                                  reason=data.validated_data["reason"], actor=request.user, request=request)
        return Response(s.CardSerializer(self.get_queryset().get(pk=card.pk)).data)


class PriceAdminViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                        viewsets.GenericViewSet):
    """/admin-api/prices/: the price history; a change is a new row from its effective time."""

    permission_classes = [IsStaff]
    serializer_class = s.PriceSerializer
    filterset_fields = {"accelerator__slug": ["exact"]}

    def get_queryset(self):
        return selectors.price_list()

    @idempotent()
    def create(self, request, *args, **kwargs):
        data = s.PriceSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        price = services.price_create(accelerator=v["accelerator"], on_demand_per_card_hour=v["on_demand_per_card_hour"],
                                      monthly_per_card_hour=v.get("monthly_per_card_hour"),
                                      effective_from=v.get("effective_from"), actor=request.user, request=request)
        return Response(s.PriceSerializer(price).data, status=status.HTTP_201_CREATED)


class ImageAdminViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                        mixins.UpdateModelMixin, viewsets.GenericViewSet):
    """/admin-api/images/: all images (active or not); create and PATCH."""

    permission_classes = [IsStaff]
    serializer_class = s.ImageAdminSerializer
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self):
        return selectors.image_list(active_only=False)

    @idempotent()
    def create(self, request, *args, **kwargs):
        data = s.ImageAdminSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        image = services.image_save(image=Image(), actor=request.user, request=request, **data.validated_data)
        return Response(s.ImageAdminSerializer(image).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request, *args, **kwargs):
        image = self.get_object()
        data = s.ImageAdminSerializer(image, data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        image = services.image_save(image=image, actor=request.user, request=request, **data.validated_data)
        return Response(s.ImageAdminSerializer(image).data)

    def update(self, request, *args, **kwargs):
        return self.partial_update(request, *args, **kwargs)
