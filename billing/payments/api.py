"""Top-up API and the Stripe webhook (SPEC §4 Payments, §5); routes appended to billing/api/urls.py."""
from django.urls import path
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.models_payments import UCNY_PER_FEN, TopUp, TopUpState
from core.errors import ValidationFailed
from core.fields import MoneyField
from core.idempotency import idempotent
from core.metrics import WEBHOOK_FAILURES_TOTAL
from core.serializers import StrictSerializer
from tenancy.permissions import require

from .events import stripe_event_apply, stripe_event_verify
from .selectors import topup_get, topup_list
from .services import topup_create

PENDING = (TopUpState.CREATED, TopUpState.PROCESSING, TopUpState.FAILED)


class TopUpCreateSerializer(StrictSerializer):
    amount = MoneyField(help_text=gettext_lazy('CNY as a decimal string with at most 2 significant decimals, e.g. "100.00".'))


class TopUpSerializer(serializers.ModelSerializer):
    amount = MoneyField(read_only=True)
    amount_refunded = serializers.SerializerMethodField()
    client_secret = serializers.SerializerMethodField()

    class Meta:
        model = TopUp
        fields = ["id", "amount", "state", "client_secret", "amount_refunded", "created_at", "credited_at"]
        read_only_fields = fields

    def get_amount_refunded(self, obj) -> str:
        return MoneyField().to_representation(obj.refunded_fen * UCNY_PER_FEN)

    def get_client_secret(self, obj) -> str | None:
        # Only while the customer can still confirm the payment.
        return (obj.client_secret or None) if obj.state in PENDING else None


class TopUpListCreateView(generics.ListAPIView):
    """GET: the organization's top-ups; POST: start a top-up (a Stripe PaymentIntent)."""

    permission_classes = [require(read="read_billing", write="billing")]
    serializer_class = TopUpSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no organization
            return TopUp.objects.none()
        return topup_list(org=self.request.org)

    @extend_schema(request=TopUpCreateSerializer, responses={201: TopUpSerializer})
    @idempotent(atomic=False)  # topup_create commits its row before calling Stripe
    def post(self, request):
        data = TopUpCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        topup = topup_create(org=request.org, actor=request.user, amount=data.validated_data["amount"],
                             request=request)
        return Response(TopUpSerializer(topup).data, status=status.HTTP_201_CREATED)


class TopUpDetailView(generics.RetrieveAPIView):
    """One top-up of the organization (another organization's id → 404)."""

    permission_classes = [require(read="read_billing", write=None)]
    serializer_class = TopUpSerializer

    def get_object(self):
        return topup_get(org=self.request.org, id=self.kwargs["id"])


class StripeWebhookView(APIView):
    """Stripe events: verified over the raw body, applied exactly once; non-2xx makes Stripe retry."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=None, responses={200: None})
    def post(self, request):
        try:
            event = stripe_event_verify(payload=request.body, signature=request.headers.get("Stripe-Signature"))
        except ValidationFailed as exc:  # observability: refused deliveries, by reason
            bad_sig = "Stripe-Signature" in (getattr(exc, "details", None) or {})
            WEBHOOK_FAILURES_TOTAL.labels(reason="bad_signature" if bad_sig else "malformed").inc()
            raise
        try:
            outcome = stripe_event_apply(event=event, source="webhook")
        except Exception:
            WEBHOOK_FAILURES_TOTAL.labels(reason="processing_error").inc()
            raise
        return Response({"received": True, "outcome": outcome})


urlpatterns = [
    path("billing/topups/", TopUpListCreateView.as_view(), name="topup-list"),
    path("billing/topups/<uuid:id>/", TopUpDetailView.as_view(), name="topup-detail"),
    path("billing/stripe/webhook/", StripeWebhookView.as_view(), name="stripe-webhook"),
]
