"""GET /api/v1/ping/: the cheapest authenticated DRF call, the baseline bench/api_load.py compares against."""
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView


class PingView(APIView):
    """Answers {"ok": true} to any authenticated caller (token or session): no query beyond authentication."""

    permission_classes = [IsAuthenticated]

    @extend_schema(operation_id="ping", responses={200: inline_serializer("Ping", {"ok": serializers.BooleanField()})})
    def get(self, request):
        return Response({"ok": True})
