"""Tenancy API bodies (SPEC §5)."""
from rest_framework import serializers

from core.serializers import StrictSerializer

from ..choices import Role
from ..models import (
    ApiToken,
    AuditEvent,
    Membership,
    Organization,
    SshKey,
    SsoBinding,
    SsoBindingKind,
    TokenScope,
)

# What an SSO binding may make a newcomer: any role but owner (API schema: JoiningRoleEnum).
JOINING_ROLES = [c for c in Role.choices if c[0] != Role.OWNER]


class OrganizationSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Organization
        fields = ["id", "name", "slug", "is_personal", "card_quota", "mfa_required", "real_name_verified_at",
                  "created_at", "role"]

    def get_role(self, obj) -> str | None:
        membership = self.context.get("membership")
        return membership.role if membership is not None else None


class MemberSerializer(serializers.ModelSerializer):
    user_id = serializers.UUIDField(source="user.id", read_only=True)
    email = serializers.EmailField(source="user.email", read_only=True)
    name = serializers.CharField(source="user.name", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "user_id", "email", "name", "role", "created_at"]


class MemberInviteSerializer(StrictSerializer):
    email = serializers.EmailField()
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)


class MemberRoleSerializer(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices)


class TokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "scope", "prefix", "created_at", "expires_at", "last_used_at"]


class TokenCreatedSerializer(TokenSerializer):
    token = serializers.SerializerMethodField()

    class Meta(TokenSerializer.Meta):
        fields = ["id", "name", "scope", "prefix", "token", "created_at", "expires_at", "last_used_at"]

    def get_token(self, obj) -> str | None:
        return self.context.get("secret")


class TokenCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100)
    scope = serializers.ChoiceField(choices=TokenScope.choices, default=TokenScope.WRITE)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


class SshKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = SshKey
        fields = ["id", "name", "key_type", "fingerprint", "public_key", "created_at"]


class SshKeyCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100)
    public_key = serializers.CharField(max_length=16_384, trim_whitespace=True)


class AuditEventSerializer(serializers.ModelSerializer):
    actor_id = serializers.UUIDField(source="actor.id", read_only=True, allow_null=True, default=None)
    actor_email = serializers.EmailField(source="actor.email", read_only=True, allow_null=True, default=None)

    class Meta:
        model = AuditEvent
        fields = ["id", "action", "actor_id", "actor_email", "target_type", "target_id", "ip", "user_agent",
                  "request_id", "details", "created_at"]


class OrganizationUpdateSerializer(StrictSerializer):
    mfa_required = serializers.BooleanField(help_text="Every member needs a second factor (TOTP or a passkey) "
                                                      "to use the console; API tokens are not affected.")


class SsoBindingSerializer(serializers.ModelSerializer):
    approved = serializers.SerializerMethodField()

    class Meta:
        model = SsoBinding
        fields = ["id", "kind", "value", "role", "approved", "approved_at", "created_at"]

    def get_approved(self, obj) -> bool:
        return obj.approved_at is not None


class SsoBindingCreateSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=SsoBindingKind.choices)
    value = serializers.CharField(max_length=253, help_text="An email domain (lab.example.edu.cn) or the id of "
                                                            "an OpenID Connect provider the operator configured.")
    role = serializers.ChoiceField(choices=JOINING_ROLES, default=Role.MEMBER)
