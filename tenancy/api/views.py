"""Tenancy API: the current organization, members, own tokens, own SSH keys, the audit log."""
from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.idempotency import idempotent
from core.schema import schema_generation
from core.serializers import body_refuse_unknown

from .. import selectors, services, sso
from ..mfa import organization_mfa_required_set
from ..models import ApiToken, AuditEvent, Membership, SshKey, SsoBinding
from ..permissions import require
from . import serializers as s


class CurrentOrganizationView(APIView):
    """GET the organization the credential acts in, with the caller's role and the card quota; PATCH its
    sign-in rule `mfa_required` (owners)."""

    permission_classes = [require(read="read_org", write="sign_in_rules")]

    @extend_schema(responses=s.OrganizationSerializer)
    def get(self, request):
        return Response(s.OrganizationSerializer(request.org, context={"membership": request.membership}).data)

    @extend_schema(request=s.OrganizationUpdateSerializer, responses=s.OrganizationSerializer)
    def patch(self, request):
        body = s.OrganizationUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        org = organization_mfa_required_set(actor_membership=request.membership, request=request,
                                            required=body.validated_data["mfa_required"])
        return Response(s.OrganizationSerializer(org, context={"membership": request.membership}).data)


class SsoBindingListView(generics.ListAPIView):
    """GET the organization's SSO bindings; POST asks for one (owners): people signing in through SSO for the
    first time from the email domain or the IdP join with the role, once an operator approved it."""

    permission_classes = [require(read="read_sign_in", write="sign_in_rules")]
    serializer_class = s.SsoBindingSerializer

    def get_queryset(self):
        if schema_generation(self):
            return SsoBinding.objects.none()
        return sso.sso_binding_list(org=self.request.org)

    @extend_schema(request=s.SsoBindingCreateSerializer, responses={201: s.SsoBindingSerializer})
    @idempotent()
    def post(self, request):
        body = s.SsoBindingCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        binding = sso.sso_binding_create(actor_membership=request.membership, request=request,
                                         **body.validated_data)
        return Response(s.SsoBindingSerializer(binding).data, status=status.HTTP_201_CREATED)


class SsoBindingDetailView(APIView):
    """GET one SSO binding; DELETE removes it (owners)."""

    permission_classes = [require(read="read_sign_in", write="sign_in_rules")]
    serializer_class = s.SsoBindingSerializer

    @extend_schema(responses=s.SsoBindingSerializer)
    def get(self, request, id):
        return Response(s.SsoBindingSerializer(sso.sso_binding_get(org=request.org, id=id)).data)

    @extend_schema(responses={204: None})
    def delete(self, request, id):
        binding = sso.sso_binding_get(org=request.org, id=id)
        body_refuse_unknown(request)
        sso.sso_binding_delete(actor_membership=request.membership, binding=binding, request=request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemberListView(generics.ListAPIView):
    """GET members; POST invites an existing user by email with a role (owners and admins)."""

    permission_classes = [require(read="read_org", write="members_manage")]
    serializer_class = s.MemberSerializer

    def get_queryset(self):
        if schema_generation(self):
            return Membership.objects.none()
        return selectors.member_list(org=self.request.org)

    @extend_schema(request=s.MemberInviteSerializer, responses={201: s.MemberSerializer})
    @idempotent()
    def post(self, request):
        body = s.MemberInviteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        membership = services.member_invite(actor_membership=request.membership, request=request, **body.validated_data)
        return Response(s.MemberSerializer(membership).data, status=status.HTTP_201_CREATED)


class MemberDetailView(APIView):
    """GET one member; PATCH its role; DELETE removes it from the organization."""

    serializer_class = s.MemberSerializer

    permission_classes = [require(read="read_org", write="members_manage")]

    @extend_schema(responses=s.MemberSerializer)
    def get(self, request, id):
        return Response(s.MemberSerializer(selectors.member_get(org=request.org, id=id)).data)

    @extend_schema(request=s.MemberRoleSerializer, responses=s.MemberSerializer)
    def patch(self, request, id):
        membership = selectors.member_get(org=request.org, id=id)
        body = s.MemberRoleSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        membership = services.member_role_change(actor_membership=request.membership, membership=membership,
                                                 role=body.validated_data["role"], request=request)
        return Response(s.MemberSerializer(membership).data)

    @extend_schema(responses={204: None})
    def delete(self, request, id):
        membership = selectors.member_get(org=request.org, id=id)
        body_refuse_unknown(request)
        services.member_remove(actor_membership=request.membership, membership=membership, request=request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TokenListView(generics.ListAPIView):
    """GET one's own live tokens in this organization; POST creates one (the secret is in this response only)."""

    # Every role manages its own tokens; listing them is a read that `read` tokens may do.
    permission_classes = [require(read="read_org", write="tokens")]
    serializer_class = s.TokenSerializer

    def get_queryset(self):
        if schema_generation(self):
            return ApiToken.objects.none()
        return selectors.token_list(org=self.request.org, user=self.request.user)

    @extend_schema(request=s.TokenCreateSerializer, responses={201: s.TokenCreatedSerializer})
    @idempotent(redact=("token",))
    def post(self, request):
        body = s.TokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        token, secret = services.token_create(membership=request.membership, request=request, **body.validated_data)
        data = s.TokenCreatedSerializer(token, context={"secret": secret}).data
        return Response(data, status=status.HTTP_201_CREATED)


class TokenDetailView(APIView):
    """DELETE revokes one of one's own tokens."""

    serializer_class = s.TokenSerializer

    permission_classes = [require(read="read_org", write="tokens")]

    @extend_schema(responses=s.TokenSerializer)
    def get(self, request, id):
        return Response(s.TokenSerializer(selectors.token_get(org=request.org, user=request.user, id=id)).data)

    @extend_schema(responses={204: None})
    def delete(self, request, id):
        token = selectors.token_get(org=request.org, user=request.user, id=id)
        body_refuse_unknown(request)
        services.token_revoke(token=token, actor=request.user, request=request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SshKeyListView(generics.ListAPIView):
    """GET one's SSH keys; POST adds one (ed25519, ecdsa, rsa ≥ 2048)."""

    permission_classes = [require(read="read", write="ssh_keys")]
    serializer_class = s.SshKeySerializer

    def get_queryset(self):
        if schema_generation(self):
            return SshKey.objects.none()
        return selectors.ssh_key_list(user=self.request.user)

    @extend_schema(request=s.SshKeyCreateSerializer, responses={201: s.SshKeySerializer})
    @idempotent()
    def post(self, request):
        body = s.SshKeyCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key = services.ssh_key_add(user=request.user, org=request.org, request=request, **body.validated_data)
        return Response(s.SshKeySerializer(key).data, status=status.HTTP_201_CREATED)


class SshKeyDetailView(APIView):
    """GET or DELETE one of one's SSH keys."""

    serializer_class = s.SshKeySerializer

    permission_classes = [require(read="read", write="ssh_keys")]

    @extend_schema(responses=s.SshKeySerializer)
    def get(self, request, id):
        return Response(s.SshKeySerializer(selectors.ssh_key_get(user=request.user, id=id)).data)

    @extend_schema(responses={204: None})
    def delete(self, request, id):
        key = selectors.ssh_key_get(user=request.user, id=id)
        body_refuse_unknown(request)
        services.ssh_key_delete(key=key, actor=request.user, org=request.org, request=request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AuditEventListView(generics.ListAPIView):
    """GET the organization's audit log, newest first (owners and admins)."""

    permission_classes = [require(read="read_audit")]
    serializer_class = s.AuditEventSerializer

    def get_queryset(self):
        if schema_generation(self):
            return AuditEvent.objects.none()
        return selectors.audit_event_list(org=self.request.org)
