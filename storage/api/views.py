"""Volumes (the organization's), the dataset library and storage prices (catalog)."""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.selectors import instance_costs
from core.idempotency import idempotent
from core.pagination import LimitOffsetEnvelopePagination, list_parameters
from core.serializers import body_refuse_unknown
from inventory.selectors import zone_for_filter
from tenancy.permissions import require

from .. import selectors, services
from ..retention import deletion_due
from .serializers import (
    VolumeCreateSerializer,
    VolumeUpdateSerializer,
    dataset_body,
    storage_price_body,
    volume_body,
)


def _volume_response(request, volume_id, code=status.HTTP_200_OK) -> Response:
    volume = selectors.volume_get(org=request.org, volume_id=volume_id)
    return Response(volume_body(volume, costs=instance_costs([volume.pk]), deletion_at=deletion_due(volume)),
                    status=code)


class VolumeListCreateView(APIView):
    """GET the organization's volumes (?zone=, ?kind=); POST creates one (201), billed per GiB-hour on its size."""

    permission_classes = [require(read="read", write="instances")]

    @extend_schema(operation_id="volumes_list", parameters=list_parameters(), responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        zone = request.query_params.get("zone")
        kind = request.query_params.get("kind")
        qs = selectors.volume_list(org=request.org, zone=zone_for_filter(zone) if zone else None,
                                   kind=kind if kind in ("disk", "shared") else None)
        paginator = LimitOffsetEnvelopePagination()
        page = paginator.paginate_queryset(qs, request, view=self)
        costs = instance_costs([v.pk for v in page])
        return paginator.get_paginated_response(
            [volume_body(v, costs=costs, deletion_at=deletion_due(v)) for v in page])

    @extend_schema(request=VolumeCreateSerializer, responses={201: OpenApiTypes.OBJECT})
    @idempotent()
    def post(self, request):
        body = VolumeCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        volume = services.volume_create(org=request.org, zone=zone_for_filter(data["zone"]), name=data["name"],
                                        kind=data["kind"], size_gib=data["size_gib"], actor=request.user,
                                        request=request)
        return _volume_response(request, volume.pk, status.HTTP_201_CREATED)


class VolumeDetailView(APIView):
    """GET one volume; PATCH {"size_gib"} grows it online (never shrinks); DELETE (409 volume_attached while
    mounted) → 204."""

    permission_classes = [require(read="read", write="instances")]

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request, volume_id):
        return _volume_response(request, volume_id)

    @extend_schema(request=VolumeUpdateSerializer, responses={200: OpenApiTypes.OBJECT})
    def patch(self, request, volume_id):
        selectors.volume_get(org=request.org, volume_id=volume_id)  # 404 first
        body = VolumeUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        volume = services.volume_grow(org=request.org, volume_id=volume_id, actor=request.user, request=request,
                                      size_gib=body.validated_data["size_gib"])
        return _volume_response(request, volume.pk)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, volume_id):
        volume = selectors.volume_get(org=request.org, volume_id=volume_id)
        body_refuse_unknown(request)
        services.volume_delete(org=request.org, volume_id=volume.pk, actor=request.user, request=request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DatasetListView(APIView):
    """GET the dataset and model library (read-only, free; mounted at /datasets/<slug>); ?zone= narrows it."""

    permission_classes = [require(read="catalog")]

    @extend_schema(operation_id="datasets_list", parameters=list_parameters(), responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        zone = request.query_params.get("zone")
        qs = selectors.dataset_list(zone=zone_for_filter(zone) if zone else None)
        paginator = LimitOffsetEnvelopePagination()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response([dataset_body(d) for d in page])


class DatasetDetailView(APIView):
    """GET one library entry by slug."""

    permission_classes = [require(read="catalog")]

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request, slug):
        return Response(dataset_body(selectors.dataset_get(dataset=slug)))


class StoragePriceListView(APIView):
    """GET the storage prices in effect: per zone and kind, µCNY per GiB-hour (catalog)."""

    permission_classes = [require(read="catalog")]

    @extend_schema(operation_id="storage_prices_list", responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        return Response({"results": [storage_price_body(*r) for r in selectors.storage_price_rows()]})
