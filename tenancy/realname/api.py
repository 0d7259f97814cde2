"""Real-name verification API: the organization's status and submissions (every role reads), a submission (owners
and admins; the licence as base64 in JSON). Routes appended to tenancy/api/urls.py."""
import base64
import binascii

from django.urls import path
from django.utils.translation import gettext
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.fields import MoneyField
from core.idempotency import idempotent
from core.serializers import StrictSerializer

from ..models_realname import LICENCE_MAX_BYTES, RealNameKind, RealNameVerification
from ..permissions import require
from .policy import org_unverified, policy_summary
from .selectors import realname_get, realname_list
from .services import realname_submit


class RealNameSubmitSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=RealNameKind.choices)
    legal_name = serializers.CharField(max_length=100, help_text="The person's or the company's registered name.")
    id_number = serializers.CharField(max_length=18, required=False, allow_blank=True, default="",
                                      help_text="individual: citizen identification number (GB 11643, 18 "
                                                "characters); stored encrypted, shown masked.")
    credit_code = serializers.CharField(max_length=18, required=False, allow_blank=True, default="",
                                        help_text="enterprise: unified social credit code (GB 32100).")
    licence = serializers.CharField(required=False, allow_blank=True, default="",
                                    max_length=(LICENCE_MAX_BYTES * 4) // 3 + 4,
                                    help_text="enterprise: the business licence (PDF, PNG or JPEG), base64.")

    def validate_licence(self, value: str) -> bytes:
        try:
            return base64.b64decode(value, validate=True) if value else b""
        except (binascii.Error, ValueError):
            raise serializers.ValidationError(gettext("Not valid base64.")) from None


class RealNameSerializer(serializers.ModelSerializer):
    class Meta:
        model = RealNameVerification
        fields = ["id", "kind", "legal_name", "id_number_masked", "credit_code", "state", "reason", "created_at",
                  "decided_at"]
        read_only_fields = fields


class RealNamePolicySerializer(serializers.Serializer):
    enabled = serializers.BooleanField()
    refused_accelerators = serializers.ListField(child=serializers.CharField(),
                                                 help_text="Card type slug prefixes refused until verified.")
    bare_metal = serializers.BooleanField(help_text="Whether bare metal is allowed before verification.")
    topup_max = MoneyField(help_text="Top-ups allowed in all before verification.")


class RealNameStatusSerializer(serializers.Serializer):
    verified = serializers.BooleanField()
    limited = serializers.BooleanField(help_text="Whether the unverified-organization policy applies now.")
    verified_at = serializers.DateTimeField(allow_null=True)
    current = RealNameSerializer(allow_null=True, help_text="The newest submission.")
    submissions = RealNameSerializer(many=True)
    policy = RealNamePolicySerializer()


def _status(org) -> dict:
    submissions = list(realname_list(org=org)[:20])
    return {"verified": org.real_name_verified_at is not None, "limited": org_unverified(org),
            "verified_at": org.real_name_verified_at, "current": submissions[0] if submissions else None,
            "submissions": submissions, "policy": policy_summary()}


class RealNameView(APIView):
    """GET the organization's real-name status, its submissions and what an unverified organization may do;
    POST submits one for review (owners and admins)."""

    permission_classes = [require(read="read_org", write="members_manage")]

    @extend_schema(responses=RealNameStatusSerializer)
    def get(self, request):
        return Response(RealNameStatusSerializer(_status(request.org)).data)

    @extend_schema(request=RealNameSubmitSerializer, responses={201: RealNameSerializer})
    @idempotent()
    def post(self, request):
        body = RealNameSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        verification = realname_submit(org=request.org, actor=request.user, request=request, **body.validated_data)
        return Response(RealNameSerializer(verification).data, status=status.HTTP_201_CREATED)


class RealNameDetailView(APIView):
    """GET one submission of the organization (another organization's id → 404)."""

    permission_classes = [require(read="read_org")]

    @extend_schema(operation_id="organizations_current_verification_detail", responses=RealNameSerializer)
    def get(self, request, id):
        return Response(RealNameSerializer(realname_get(org=request.org, id=id)).data)


urlpatterns = [
    path("organizations/current/verification/", RealNameView.as_view(), name="realname"),
    path("organizations/current/verification/<uuid:id>/", RealNameDetailView.as_view(), name="realname-detail"),
]
