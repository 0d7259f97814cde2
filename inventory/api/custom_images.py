"""/api/v1/custom-images/: the organization's private images (register by reference with an optional pull login,
list, get, delete). The login is write-only: a body says only whether one is set."""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.idempotency import idempotent
from core.pagination import LimitOffsetEnvelopePagination
from core.serializers import StrictSerializer, body_refuse_unknown
from tenancy.permissions import require

from .. import custom_images as services
from .. import selectors
from ..choices import Vendor


class CustomImageRegisterSerializer(StrictSerializer):
    name = serializers.CharField(max_length=64)
    reference = serializers.CharField(max_length=255, help_text="[registry/]repository[:tag][@sha256:digest]")
    vendors = serializers.ListField(child=serializers.ChoiceField(choices=Vendor.values), required=False,
                                    allow_empty=False, help_text='the accelerators it runs on; default ["nvidia"]')
    username = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    password = serializers.CharField(max_length=4096, required=False, allow_blank=True, default="",
                                     write_only=True, trim_whitespace=False,
                                     help_text="password or access token; never shown again")


def custom_image_body(image) -> dict:
    return {"id": str(image.pk), "name": image.name, "reference": image.reference, "digest": image.digest or None,
            "architectures": list(image.architectures or []), "vendors": list(image.vendors or []),
            "origin": image.origin, "state": image.state, "state_reason": image.state_reason or None,
            "size_bytes": image.size_bytes, "credentials": "set" if image.has_credentials else "not set",
            "username": image.username or None,
            "source_instance_id": str(image.source_instance_id) if image.source_instance_id else None,
            "created_at": image.created_at.isoformat().replace("+00:00", "Z")}


class CustomImageListView(APIView):
    """GET the organization's private images; POST registers one (201) once its registry shows it exists and is
    built for the vendors' nodes (400 naming `reference` or `credentials` otherwise)."""

    permission_classes = [require(read="read", write="instances")]

    @extend_schema(operation_id="custom_images_list", responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        paginator = LimitOffsetEnvelopePagination()
        page = paginator.paginate_queryset(selectors.custom_image_list(org=request.org), request, view=self)
        return paginator.get_paginated_response([custom_image_body(i) for i in page])

    @extend_schema(request=CustomImageRegisterSerializer, responses={201: OpenApiTypes.OBJECT})
    @idempotent(atomic=False)  # the registry is asked over the network first
    def post(self, request):
        body = CustomImageRegisterSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        image = services.custom_image_register(org=request.org, name=data["name"], reference=data["reference"],
                                               vendors=data.get("vendors"), username=data["username"],
                                               password=data["password"], actor=request.user, request=request)
        return Response(custom_image_body(image), status=status.HTTP_201_CREATED)


class CustomImageDetailView(APIView):
    """GET one private image; DELETE forgets it (204; a saved one stops being billed)."""

    permission_classes = [require(read="read", write="instances")]

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request, image_id):
        return Response(custom_image_body(selectors.custom_image_get(org=request.org, image_id=image_id)))

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, image_id):
        image = selectors.custom_image_get(org=request.org, image_id=image_id)
        body_refuse_unknown(request)
        services.custom_image_delete(org=request.org, image_id=image.pk, actor=request.user, request=request)
        return Response(status=status.HTTP_204_NO_CONTENT)
