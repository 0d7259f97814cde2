"""Billing API: balance, ledger lines, usage (SPEC §5); read_billing for all of them."""
from datetime import timedelta

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics
from rest_framework.response import Response
from rest_framework.views import APIView

from core.dbclock import db_now
from core.schema import schema_generation
from tenancy.permissions import require

from .. import selectors
from ..models import Meter, Transfer
from . import serializers as s


class BalanceView(APIView):
    """GET the organization's balances, available funds, burn rate and exhaustion estimate."""

    permission_classes = [require(read="read_billing")]

    @extend_schema(responses=s.BalanceSerializer)
    def get(self, request):
        return Response(s.BalanceSerializer(selectors.balance_summary(org=request.org)).data)


class TransferListView(generics.ListAPIView):
    """GET the organization's ledger lines, newest first."""

    permission_classes = [require(read="read_billing")]
    serializer_class = s.TransferLineSerializer

    def get_queryset(self):
        if schema_generation(self):
            return Transfer.objects.none()
        return selectors.transfer_list(org=self.request.org)

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "org": getattr(self.request, "org", None)}


class UsageListView(generics.ListAPIView):
    """GET usage lines per meter that ran in [from, to)."""

    permission_classes = [require(read="read_billing")]
    serializer_class = s.UsageLineSerializer

    def _window(self):
        if not hasattr(self, "_window_cache"):
            q = s.UsageQuerySerializer(data=self.request.query_params)
            q.is_valid(raise_exception=True)
            now = db_now()
            end = q.validated_data.get("to") or now
            start = q.validated_data.get("from") or end - timedelta(days=30)
            self._window_cache = (start, end, now)
        return self._window_cache

    def get_queryset(self):
        if schema_generation(self):
            return Meter.objects.none()
        start, end, _ = self._window()
        return selectors.usage_list(org=self.request.org, start=start, end=end)

    def get_serializer_context(self):
        if schema_generation(self):
            return super().get_serializer_context()
        start, end, now = self._window()
        return {**super().get_serializer_context(), "start": start, "end": end, "now": now}

    @extend_schema(parameters=[OpenApiParameter("from", str, description="ISO-8601 start (default: to − 30 days)"),
                               OpenApiParameter("to", str, description="ISO-8601 end (default: now)")])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)
