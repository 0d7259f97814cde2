"""Webhook endpoints of the organization (owners and admins), their deliveries and resends."""
from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.idempotency import idempotent
from core.schema import schema_generation
from core.serializers import body_refuse_unknown
from tenancy.permissions import require

from .. import selectors, services
from ..events import EVENT_TYPES
from ..models import WebhookDelivery, WebhookEndpoint
from . import serializers as s

PERMISSION = require(read="read_webhooks", write="webhooks")


class EventTypeListView(APIView):
    """GET the event types an endpoint may subscribe to."""

    permission_classes = [require(read="read_org")]

    @extend_schema(responses=s.EventTypeSerializer(many=True))
    def get(self, request):
        return Response([{"type": t, "description": d} for t, d in EVENT_TYPES.items()])


class EndpointListView(generics.ListAPIView):
    """GET the organization's webhook endpoints; POST registers one (the secret is in this response only)."""

    permission_classes = [PERMISSION]
    serializer_class = s.EndpointSerializer

    def get_queryset(self):
        if schema_generation(self):
            return WebhookEndpoint.objects.none()
        return selectors.endpoint_list(org=self.request.org)

    @extend_schema(request=s.EndpointCreateSerializer, responses={201: s.EndpointCreatedSerializer})
    @idempotent()
    def post(self, request):
        body = s.EndpointCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        endpoint, secret = services.endpoint_create(org=request.org, actor=request.user, request=request,
                                                    **body.validated_data)
        data = {**s.EndpointSerializer(endpoint).data, "secret": secret}
        return Response(data, status=status.HTTP_201_CREATED)


class EndpointDetailView(APIView):
    """GET one endpoint; PATCH its url, event types, description or `enabled`; DELETE removes it."""

    permission_classes = [PERMISSION]
    serializer_class = s.EndpointSerializer

    @extend_schema(responses=s.EndpointSerializer)
    def get(self, request, id):
        return Response(s.EndpointSerializer(selectors.endpoint_get(org=request.org, id=id)).data)

    @extend_schema(request=s.EndpointUpdateSerializer, responses=s.EndpointSerializer)
    def patch(self, request, id):
        endpoint = selectors.endpoint_get(org=request.org, id=id)
        body = s.EndpointUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        endpoint = services.endpoint_update(endpoint=endpoint, actor=request.user, request=request,
                                            **body.validated_data)
        return Response(s.EndpointSerializer(endpoint).data)

    @extend_schema(responses={204: None})
    def delete(self, request, id):
        endpoint = selectors.endpoint_get(org=request.org, id=id)  # 404 before anything about the body
        body_refuse_unknown(request)
        services.endpoint_delete(endpoint=endpoint, actor=request.user, request=request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SecretRotateView(APIView):
    """POST: a new signing secret (shown once); the old one keeps signing for the overlap window."""

    permission_classes = [PERMISSION]

    @extend_schema(request=None, responses={201: s.SecretSerializer})
    @idempotent()
    def post(self, request, id):
        endpoint = selectors.endpoint_get(org=request.org, id=id)
        body_refuse_unknown(request)
        secret = services.secret_rotate(endpoint=endpoint, actor=request.user, request=request)
        return Response({"secret": secret}, status=status.HTTP_201_CREATED)


class DeliveryListView(generics.ListAPIView):
    """GET an endpoint's deliveries, newest first, with every attempt's status and response."""

    permission_classes = [PERMISSION]
    serializer_class = s.DeliverySerializer

    def get_queryset(self):
        if schema_generation(self):
            return WebhookDelivery.objects.none()
        return selectors.delivery_list(endpoint=selectors.endpoint_get(org=self.request.org, id=self.kwargs["id"]))


class DeliveryResendView(APIView):
    """POST: send a delivery again now."""

    permission_classes = [PERMISSION]

    @extend_schema(request=None, responses={202: s.DeliverySerializer})
    def post(self, request, id, delivery_id):
        endpoint = selectors.endpoint_get(org=request.org, id=id)
        delivery = selectors.delivery_get(endpoint=endpoint, id=delivery_id)
        body_refuse_unknown(request)
        delivery = services.delivery_resend(delivery=delivery, actor=request.user, request=request)
        return Response(s.DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)
