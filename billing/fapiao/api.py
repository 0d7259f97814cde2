"""Fapiao API: list and request (owner, admin, billing), what is left to invoice, cancel a request, download the
issued PDF. Routes appended to billing/api/urls.py."""
from django.http import HttpResponse
from django.urls import path
from django.utils.translation import gettext, gettext_lazy
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import NotFoundError
from core.fields import MoneyField
from core.idempotency import idempotent
from core.schema import schema_generation
from core.serializers import StrictSerializer, body_refuse_unknown
from tenancy.permissions import require

from ..models_fapiao import FapiaoKind, FapiaoRequest, FapiaoState
from .selectors import fapiao_get, fapiao_list, invoiceable
from .services import fapiao_cancel, fapiao_request


def _text(max_length: int, **kwargs):
    return serializers.CharField(max_length=max_length, required=False, allow_blank=True, default="", **kwargs)


class FapiaoCreateSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=FapiaoKind.choices, help_text=gettext_lazy("normal (普通) or special (专用)"))
    amount = MoneyField(max_decimals=2, help_text=gettext_lazy('CNY in whole fen, e.g. "300.00"; at most what is available.'))
    title = serializers.CharField(max_length=100, help_text=gettext_lazy("The buyer's name (抬头)."))
    taxpayer_id = _text(18, help_text=gettext_lazy("Unified social credit code (18 characters, GB 32100 check character)."))
    address = _text(200)
    phone = _text(30)
    bank_name = _text(100)
    bank_account = _text(40)
    email = serializers.EmailField(required=False, allow_blank=True, default="",
                                   help_text=gettext_lazy("Where the e-fapiao is sent too (default: yours)."))
    note = _text(200)


class FapiaoSerializer(serializers.ModelSerializer):
    amount = MoneyField(read_only=True)
    red_letter_amount = MoneyField(read_only=True)
    pdf_url = serializers.SerializerMethodField()

    class Meta:
        model = FapiaoRequest
        fields = ["id", "kind", "amount", "title", "taxpayer_id", "address", "phone", "bank_name", "bank_account",
                  "email", "note", "state", "number", "reason", "red_letter_amount", "created_at", "decided_at",
                  "pdf_url"]
        read_only_fields = fields

    def get_pdf_url(self, obj) -> str | None:
        return f"/api/v1/billing/fapiao/{obj.pk}/pdf/" if obj.state == FapiaoState.ISSUED else None


class InvoiceableSerializer(serializers.Serializer):
    paid = MoneyField()
    refunded = MoneyField()
    invoiced = MoneyField()
    available = MoneyField(allow_negative=True)


class FapiaoListCreateView(generics.ListAPIView):
    """GET: the organization's fapiao requests; POST: ask for one over what was paid and not yet invoiced."""

    permission_classes = [require(read="read_billing", write="billing")]
    serializer_class = FapiaoSerializer

    def get_queryset(self):
        if schema_generation(self):
            return FapiaoRequest.objects.none()
        return fapiao_list(org=self.request.org)

    @extend_schema(request=FapiaoCreateSerializer, responses={201: FapiaoSerializer})
    @idempotent()
    def post(self, request):
        data = FapiaoCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fapiao = fapiao_request(org=request.org, user=request.user, request=request, **data.validated_data)
        return Response(FapiaoSerializer(fapiao).data, status=status.HTTP_201_CREATED)


class FapiaoAvailableView(APIView):
    """GET what the organization paid, had refunded and invoiced, and what it may still invoice (µCNY figures)."""

    permission_classes = [require(read="read_billing")]

    @extend_schema(responses=InvoiceableSerializer)
    def get(self, request):
        return Response(InvoiceableSerializer(invoiceable(org=request.org)).data)


class FapiaoDetailView(generics.RetrieveAPIView):
    """One fapiao request of the organization (another organization's id → 404)."""

    permission_classes = [require(read="read_billing", write=None)]
    serializer_class = FapiaoSerializer

    def get_object(self):
        return fapiao_get(org=self.request.org, id=self.kwargs["id"])


class FapiaoCancelView(APIView):
    """POST withdraws a request not yet issued (no body)."""

    permission_classes = [require(read="read_billing", write="billing")]

    @extend_schema(request=None, responses=FapiaoSerializer)
    def post(self, request, id):
        fapiao_get(org=request.org, id=id)  # another organization's id → 404 before anything else
        body_refuse_unknown(request)
        return Response(FapiaoSerializer(fapiao_cancel(org=request.org, fapiao_id=id, actor=request.user,
                                                       request=request)).data)


class FapiaoPdfView(APIView):
    """GET the issued fapiao's PDF (404 until it is issued)."""

    permission_classes = [require(read="read_billing")]

    @extend_schema(responses={(200, "application/pdf"): OpenApiTypes.BINARY})
    def get(self, request, id):
        return fapiao_pdf_response(fapiao_get(org=request.org, id=id, with_pdf=True))


def fapiao_pdf_response(fapiao: FapiaoRequest) -> HttpResponse:
    """The PDF as an attachment named by its number; NotFoundError while it is not issued (the console uses it)."""
    if fapiao.state != FapiaoState.ISSUED or not fapiao.pdf:
        raise NotFoundError(gettext("This fapiao has not been issued yet."))
    response = HttpResponse(bytes(fapiao.pdf), content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="fapiao-{fapiao.number}.pdf"'
    return response


urlpatterns = [
    path("billing/fapiao/", FapiaoListCreateView.as_view(), name="fapiao-list"),
    path("billing/fapiao/available/", FapiaoAvailableView.as_view(), name="fapiao-available"),
    path("billing/fapiao/<uuid:id>/", FapiaoDetailView.as_view(), name="fapiao-detail"),
    path("billing/fapiao/<uuid:id>/cancel/", FapiaoCancelView.as_view(), name="fapiao-cancel"),
    path("billing/fapiao/<uuid:id>/pdf/", FapiaoPdfView.as_view(), name="fapiao-pdf"),
]
