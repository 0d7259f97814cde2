"""POST /api/v1/instances/<id>/save-image/ {"name", "tag"?}: "Save as image" of a running container instance → 202 with
the organization's new private image (state saving; GET /api/v1/custom-images/<id>/ shows it ready, with its size,
or failed with why)."""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.serializers import StrictSerializer
from inventory.api.custom_images import custom_image_body
from tenancy.permissions import require

from .. import selectors
from ..services.images import instance_image_save


class SaveImageSerializer(StrictSerializer):
    name = serializers.CharField(max_length=64)
    tag = serializers.CharField(max_length=128, required=False, default="latest")


class InstanceSaveImageView(APIView):
    """Commit the instance's container and push it to the operator's registry under the organization's namespace;
    billed as storage once saved. 409 for bare metal, an instance not running, or no registry configured."""

    permission_classes = [require(read="read", write="instances")]

    @extend_schema(request=SaveImageSerializer, responses={202: OpenApiTypes.OBJECT})
    def post(self, request, instance_id):
        selectors.instance_get(org=request.org, instance_id=instance_id)  # 404 first, before any lock
        body = SaveImageSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        image = instance_image_save(org=request.org, instance_id=instance_id, name=body.validated_data["name"],
                                    tag=body.validated_data["tag"], actor=request.user, request=request)
        return Response(custom_image_body(image), status=status.HTTP_202_ACCEPTED)
