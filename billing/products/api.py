"""Products API (SPEC §5): sponsorships, invoices, statements; routes appended to billing/api/urls.py."""
import json

from django.http import HttpResponse
from django.urls import path, re_path
from django.utils.translation import gettext_lazy
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import generics, serializers, status
from rest_framework.renderers import BaseRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from core.fields import MoneyField
from core.idempotency import idempotent
from core.renderers import FastJSONRenderer
from core.serializers import StrictSerializer
from tenancy.permissions import require

from ..models_products import Invoice, SponsorshipProposal
from . import selectors
from .postpaid import invoice_outstanding, invoice_pay, invoice_pay_amount
from .sponsorship import MAX_CARD_HOURS, sponsorship_submit
from .statement_formats import statement_csv, statement_json
from .statements import month_parse, statement_build, statement_months


class SponsorshipCreateSerializer(StrictSerializer):
    title = serializers.CharField(max_length=200)
    abstract = serializers.CharField(max_length=5000)
    accelerator = serializers.SlugField(max_length=40)
    card_hours = serializers.IntegerField(min_value=1, max_value=MAX_CARD_HOURS)


class SponsorshipSerializer(serializers.ModelSerializer):
    granted_amount = MoneyField(read_only=True, allow_null=True)

    class Meta:
        model = SponsorshipProposal
        fields = ["id", "title", "abstract", "accelerator", "card_hours", "state", "staff_note", "granted_amount",
                  "decided_at", "created_at"]
        read_only_fields = fields


class SponsorshipListCreateView(generics.ListAPIView):
    """GET: the organization's sponsorship proposals; POST: submit one (owner, admin, billing)."""

    permission_classes = [require(read="read_billing", write="billing")]
    serializer_class = SponsorshipSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return SponsorshipProposal.objects.none()
        return selectors.sponsorship_list(org=self.request.org)

    @extend_schema(request=SponsorshipCreateSerializer, responses={201: SponsorshipSerializer})
    @idempotent()
    def post(self, request):
        data = SponsorshipCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        proposal = sponsorship_submit(org=request.org, user=request.user, request=request, **data.validated_data)
        return Response(SponsorshipSerializer(proposal).data, status=status.HTTP_201_CREATED)


class SponsorshipDetailView(generics.RetrieveAPIView):
    """One proposal of the organization (another organization's id → 404)."""

    permission_classes = [require(read="read_billing")]
    serializer_class = SponsorshipSerializer

    def get_object(self):
        return selectors.sponsorship_get(org=self.request.org, id=self.kwargs["id"])


@extend_schema_field({"type": "string", "pattern": r"^\d{4}-\d{2}$", "example": "2026-01"})
class MonthField(serializers.DateField):
    """A month sent as YYYY-MM (the schema says so, not `format: date`)."""


class InvoiceSerializer(serializers.ModelSerializer):
    period = MonthField(format="%Y-%m")
    amount_due = MoneyField(help_text=gettext_lazy("Cash below zero at the month's end (includes superseded invoices' debt)."))
    amount_outstanding = serializers.SerializerMethodField()
    pay_amount = serializers.SerializerMethodField()

    class Meta:
        model = Invoice
        fields = ["id", "period", "amount_due", "amount_outstanding", "pay_amount", "state", "topup_id", "paid_at",
                  "created_at"]
        read_only_fields = fields

    def get_amount_outstanding(self, obj) -> str:
        """What is left to pay (exact): the amount due less what was paid in since the month ended; 0 unless open."""
        return MoneyField().to_representation(invoice_outstanding(obj))

    def get_pay_amount(self, obj) -> str:
        """What paying it charges: what is left rounded up to the fen, at least the smallest top-up; 0 unless open."""
        return MoneyField().to_representation(invoice_pay_amount(obj))


class InvoiceListView(generics.ListAPIView):
    """GET the organization's monthly invoices (postpaid organizations)."""

    permission_classes = [require(read="read_billing")]
    serializer_class = InvoiceSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Invoice.objects.none()
        return selectors.invoice_list(org=self.request.org)


class InvoicePaySerializer(StrictSerializer):
    """POST /invoices/<id>/pay/: the console's payment form sends the amount it shows; the invoice fixes what is
    charged (invoice_pay_amount), so it is accepted and not used. Any other key is an unknown field."""

    amount = serializers.CharField(max_length=40, required=False)


class InvoicePayView(APIView):
    """POST: pay an open invoice with a top-up of its amount rounded up to the fen (a Stripe PaymentIntent)."""

    permission_classes = [require(read="read_billing", write="billing")]

    @extend_schema(request=InvoicePaySerializer, responses={201: OpenApiTypes.OBJECT})
    @idempotent(atomic=False)  # a top-up: its row commits before Stripe is called (topup_create)
    def post(self, request, id):
        from ..payments.api import TopUpSerializer

        InvoicePaySerializer(data=request.data).is_valid(raise_exception=True)
        topup = invoice_pay(org=request.org, invoice_id=id, actor=request.user, request=request)
        return Response(TopUpSerializer(topup).data, status=status.HTTP_201_CREATED)


class StatementMonthSerializer(serializers.Serializer):
    month = serializers.CharField()


class StatementListView(generics.ListAPIView):
    """GET the months (YYYY-MM, billing time zone) in which the organization had ledger activity."""

    permission_classes = [require(read="read_billing")]
    serializer_class = StatementMonthSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            from ..models import Transfer  # any model: the schema needs one, the list has no path parameters

            return Transfer.objects.none()
        return [{"month": m} for m in statement_months(org=self.request.org)]


class StatementDetailView(APIView):
    """GET one month's statement as JSON (exact 6-decimal amounts)."""

    permission_classes = [require(read="read_billing")]

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request, month):
        month_parse(month)
        return Response(statement_json(statement_build(org=request.org, month=month)))


class CsvRenderer(BaseRenderer):
    """Lets `Accept: text/csv` through negotiation; errors are still the JSON envelope."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data if isinstance(data, bytes) else json.dumps(data).encode()


class StatementCsvView(APIView):
    """GET one month's statement as CSV (text/csv, stable bytes for a past month)."""

    permission_classes = [require(read="read_billing")]
    renderer_classes = [FastJSONRenderer, CsvRenderer]

    def handle_exception(self, exc):
        # Errors are the JSON envelope with a JSON content type, even when text/csv was negotiated.
        self.request.accepted_renderer, self.request.accepted_media_type = FastJSONRenderer(), "application/json"
        return super().handle_exception(exc)

    @extend_schema(responses={(200, "text/csv"): OpenApiTypes.STR})
    def get(self, request, month):
        month_parse(month)
        body = statement_csv(statement_build(org=request.org, month=month))
        response = HttpResponse(body, content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="cardmix-statement-{month}.csv"'
        return response


urlpatterns = [
    path("billing/sponsorships/", SponsorshipListCreateView.as_view(), name="sponsorship-list"),
    path("billing/sponsorships/<uuid:id>/", SponsorshipDetailView.as_view(), name="sponsorship-detail"),
    path("billing/invoices/", InvoiceListView.as_view(), name="invoice-list"),
    path("billing/invoices/<uuid:id>/pay/", InvoicePayView.as_view(), name="invoice-pay"),
    path("billing/statements/", StatementListView.as_view(), name="statement-list"),
    re_path(r"^billing/statements/(?P<month>[^/]+)\.csv$", StatementCsvView.as_view(), name="statement-csv"),
    path("billing/statements/<str:month>/", StatementDetailView.as_view(), name="statement-detail"),
]
