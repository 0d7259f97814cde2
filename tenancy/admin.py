"""Operators' admin for users, organizations (quota), tokens, SSH keys and the audit log."""
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm

from core.admin import ReadOnlyAdmin

from .audit import audit_record
from .credentials import token_revoke
from .models import ApiToken, AuditEvent, Membership, Organization, SshKey, TrialClaim, User, normalize_email


class NormalisedEmailMixin:
    """The unique check sees the stored spelling, so `ADA@x` next to `ada@x` is a form error, not a 500."""

    def clean_email(self):
        return normalize_email(self.cleaned_data.get("email"))


class UserAddForm(NormalisedEmailMixin, AdminUserCreationForm):
    class Meta:
        model = User
        fields = ["email"]


class UserEditForm(NormalisedEmailMixin, UserChangeForm):
    class Meta:
        model = User
        fields = "__all__"


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    form = UserEditForm
    add_form = UserAddForm
    ordering = ["email"]
    list_display = ["email", "name", "is_staff", "is_active", "email_verified_at", "date_joined"]
    search_fields = ["email", "name"]
    fieldsets = [
        (None, {"fields": ["email", "password", "name"]}),
        ("Status", {"fields": ["is_active", "is_staff", "is_superuser", "email_verified_at"]}),
        ("Permissions", {"fields": ["groups", "user_permissions"]}),
    ]
    add_fieldsets = [(None, {"classes": ["wide"], "fields": ["email", "password1", "password2"]})]


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "card_quota", "is_personal", "created_at"]
    search_fields = ["name", "slug"]
    inlines = [MembershipInline]

    def save_model(self, request, obj, form, change):
        """Quota changes are staff-only (this admin) and audited."""
        super().save_model(request, obj, form, change)
        if change and "card_quota" in form.changed_data:
            audit_record(action="organization.quota_set", org=obj, actor=request.user, target=obj, request=request,
                         details={"old": form.initial.get("card_quota"), "new": obj.card_quota})


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Read-only, never the hash: tokens are created by their users (the secret shown once), and revoked here only
    through token_revoke (audited). Editing revoked_at or scope in a form would revive a revoked token or widen a
    read token, unaudited."""

    list_display = ["prefix", "name", "user", "organization", "scope", "created_at", "expires_at", "last_used_at",
                    "revoked_at"]
    list_filter = ["scope", ("revoked_at", admin.EmptyFieldListFilter)]
    list_select_related = ["user", "organization"]
    search_fields = ["prefix", "name", "user__email", "organization__slug"]
    fields = ["prefix", "name", "user", "organization", "scope", "created_at", "expires_at", "last_used_at",
              "revoked_at"]
    actions = ["revoke"]

    @admin.action(description="Revoke selected tokens (they stop authenticating at once)")
    def revoke(self, request, queryset):
        revoked = 0
        for token in queryset.filter(revoked_at__isnull=True).select_related("organization").order_by("pk"):
            token_revoke(token=token, actor=request.user, request=request)
            revoked += 1
        self.message_user(request, f"{revoked} token(s) revoked.", messages.SUCCESS)


@admin.register(SshKey)
class SshKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "key_type", "fingerprint", "created_at"]
    list_select_related = ["user"]
    search_fields = ["name", "user__email", "fingerprint"]
    readonly_fields = ["key_type", "fingerprint", "public_key", "user", "created_at"]


@admin.register(TrialClaim)
class TrialClaimAdmin(ReadOnlyAdmin):
    """One trial per verified email address, ever: read-only (deleting a claim would grant the trial again)."""

    list_display = ["email", "user", "organization", "claimed_at"]
    list_select_related = ["user", "organization"]
    search_fields = ["email"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """Append-only: read, never edit."""

    list_display = ["created_at", "action", "organization", "actor", "target_type", "target_id", "ip"]
    list_filter = ["action"]
    list_select_related = ["organization", "actor"]
    search_fields = ["action", "target_id", "actor__email", "organization__slug", "request_id"]

