"""S3 access keys of a shared volume: /api/v1/volumes/<id>/keys/ (list, create: the secret in that response only)
and /api/v1/volumes/<id>/keys/<key>/ (get, revoke)."""
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.idempotency import idempotent
from core.serializers import StrictSerializer, body_refuse_unknown
from tenancy.permissions import require

from .. import selectors
from ..access_keys import access_key_create, access_key_get, access_key_list, access_key_revoke


class AccessKeyCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")


class AccessKeySerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    access_key_id = serializers.CharField()
    bucket = serializers.CharField()
    endpoint_url = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)

    def get_endpoint_url(self, key) -> str:
        from django.conf import settings

        return settings.S3_ENDPOINT_URL


class AccessKeyCreatedSerializer(AccessKeySerializer):
    secret_access_key = serializers.SerializerMethodField()

    def get_secret_access_key(self, key) -> str:
        return self.context["secret"]


class VolumeKeyListView(APIView):
    """GET the volume's live access keys; POST creates one (201; `secret_access_key` is in this response only)."""

    permission_classes = [require(read="read", write="instances")]

    @extend_schema(operation_id="volume_keys_list", responses={200: AccessKeySerializer(many=True)})
    def get(self, request, volume_id):
        volume = selectors.volume_get(org=request.org, volume_id=volume_id)
        return Response({"results": AccessKeySerializer(access_key_list(volume=volume), many=True).data})

    @extend_schema(request=AccessKeyCreateSerializer, responses={201: AccessKeyCreatedSerializer})
    @idempotent(redact=("secret_access_key",))
    def post(self, request, volume_id):
        volume = selectors.volume_get(org=request.org, volume_id=volume_id)
        body = AccessKeyCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key, secret = access_key_create(volume=volume, name=body.validated_data["name"], actor=request.user,
                                        request=request)
        return Response(AccessKeyCreatedSerializer(key, context={"secret": secret}).data,
                        status=status.HTTP_201_CREATED)


class VolumeKeyDetailView(APIView):
    """GET one key (never its secret); DELETE revokes it at the S3 endpoint → 204."""

    permission_classes = [require(read="read", write="instances")]

    @extend_schema(operation_id="volume_keys_retrieve", responses={200: AccessKeySerializer})
    def get(self, request, volume_id, key_id):
        volume = selectors.volume_get(org=request.org, volume_id=volume_id)
        return Response(AccessKeySerializer(access_key_get(volume=volume, key_id=key_id)).data)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, volume_id, key_id):
        volume = selectors.volume_get(org=request.org, volume_id=volume_id)
        body_refuse_unknown(request)
        access_key_revoke(volume=volume, key_id=key_id, actor=request.user, request=request)
        return Response(status=status.HTTP_204_NO_CONTENT)
