"""`/instances/<id>/ports/…`: an instance's HTTP ports through the platform's proxy, and their share links.

GET the declared ports (image's and user's) with their proxy paths; POST {"port", "name"?} adds one; DELETE
`/ports/<port>/` removes a user-added one. `/ports/<port>/shares/`: GET the links, POST {"expires_in_hours"}
makes one (its `url` carries the secret, shown once: a replay answers "url": null); DELETE `/shares/<id>/`
revokes it.
"""
from datetime import timedelta

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.idempotency import idempotent
from core.serializers import StrictSerializer, body_refuse_unknown
from tenancy.permissions import require

from .. import selectors
from ..http_ports import share_url
from ..services.ports import instance_port_add, instance_port_remove, port_share_create, port_share_revoke


class PortAddSerializer(StrictSerializer):
    port = serializers.IntegerField(min_value=1, max_value=65535)
    name = serializers.CharField(max_length=40, required=False, allow_blank=True, default="")


class PortShareCreateSerializer(StrictSerializer):
    expires_in_hours = serializers.IntegerField(min_value=1, max_value=24 * 30, default=24)


def share_body(share, url: str | None = None) -> dict:
    return {"id": str(share.pk), "port": share.port, "expires_at": share.expires_at,
            "revoked_at": share.revoked_at, "created_at": share.created_at, "url": url}


def _ports(request, instance_id, code=status.HTTP_200_OK):
    instance = selectors.instance_get(org=request.org, instance_id=instance_id)
    return Response({"results": selectors.instance_ports(instance=instance)}, status=code)


class InstancePortsView(APIView):
    permission_classes = [require(read="read", write="instances")]

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request, instance_id):
        return _ports(request, instance_id)

    @extend_schema(request=PortAddSerializer, responses={201: OpenApiTypes.OBJECT})
    def post(self, request, instance_id):
        selectors.instance_get(org=request.org, instance_id=instance_id)  # 404 first
        body = PortAddSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        instance_port_add(org=request.org, instance_id=instance_id, actor=request.user, request=request,
                          port=body.validated_data["port"], name=body.validated_data["name"])
        return _ports(request, instance_id, status.HTTP_201_CREATED)


class InstancePortView(APIView):
    permission_classes = [require(read="read", write="instances")]

    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT})
    def delete(self, request, instance_id, port):
        selectors.instance_get(org=request.org, instance_id=instance_id)
        body_refuse_unknown(request)
        instance_port_remove(org=request.org, instance_id=instance_id, port=port, actor=request.user, request=request)
        return _ports(request, instance_id)


class InstancePortSharesView(APIView):
    permission_classes = [require(read="read", write="instances")]

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request, instance_id, port):
        instance = selectors.instance_get(org=request.org, instance_id=instance_id)
        shares = selectors.port_shares(instance=instance).filter(port=port)[:100]
        return Response({"results": [share_body(s) for s in shares]})

    @extend_schema(request=PortShareCreateSerializer, responses={201: OpenApiTypes.OBJECT})
    @idempotent(redact=("url",))
    def post(self, request, instance_id, port):
        selectors.instance_get(org=request.org, instance_id=instance_id)
        body = PortShareCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        share, secret = port_share_create(org=request.org, instance_id=instance_id, port=port, actor=request.user,
                                          expires_in=timedelta(hours=body.validated_data["expires_in_hours"]),
                                          request=request)
        url = request.build_absolute_uri(share_url(instance_id, port, secret))
        return Response(share_body(share, url), status=status.HTTP_201_CREATED)


class InstancePortShareView(APIView):
    permission_classes = [require(read="read", write="instances")]

    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT})
    def delete(self, request, instance_id, share_id):
        selectors.port_share_get(org=request.org, instance_id=instance_id, share_id=share_id)
        body_refuse_unknown(request)
        share = port_share_revoke(org=request.org, instance_id=instance_id, share_id=share_id, actor=request.user,
                                  request=request)
        return Response(share_body(share))


