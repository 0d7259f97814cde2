"""Operators' admin for users, organizations (quota, members), tokens, SSH keys and the audit log."""
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.admin import sensitive_post_parameters_m
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_lazy

from core.admin import ActionForm, ReadOnlyAdmin, ReadOnlyInline, ServiceRefusalMixin, form_action
from core.errors import ServiceError, ValidationFailed

from . import services
from .audit import audit_record
from .choices import Role
from .credentials import token_revoke
from .models import (
    ApiToken,
    AuditEvent,
    Membership,
    Organization,
    SshKey,
    SsoBinding,
    TrialClaim,
    User,
    normalize_email,
)
from .sso import sso_binding_approve


class AuditedDeleteMixin:
    """Deletes that stay allowed in the admin are audited (`<delete_action>`, the operator as actor), from the
    change page's Delete and from the list's bulk delete alike."""

    delete_action = ""

    def delete_details(self, obj) -> dict:
        return {"name": str(obj)}

    def _audit_delete(self, request, obj):
        audit_record(action=self.delete_action, actor=request.user, target=obj, request=request,
                     details=self.delete_details(obj))

    def delete_model(self, request, obj):
        with transaction.atomic():
            self._audit_delete(request, obj)
            super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for obj in queryset.order_by("pk"):
                self._audit_delete(request, obj)
            super().delete_queryset(request, queryset)


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
    AUDITED = ("email", "name", "is_active", "is_staff", "is_superuser", "email_verified_at")

    def has_delete_permission(self, request, obj=None):
        # Deleting cascaded the user's memberships (an organization could lose its last owner, unaudited) and
        # emptied the actor of their audit events and instances; deactivate instead (is_active off: no login,
        # their API tokens stop authenticating).
        return False

    @sensitive_post_parameters_m
    def user_change_password(self, request, id, form_url=""):
        """Django's password page (set, change or disable a user's password), audited as user.password_set: who
        did it and whether a password is still usable, never the password or its hash."""
        if request.method != "POST":
            return super().user_change_password(request, id, form_url)
        with transaction.atomic():
            before = self.get_object(request, unquote(id))  # None: super answers 404
            response = super().user_change_password(request, id, form_url)
            user = before and User.objects.filter(pk=before.pk).first()
            if user is not None and user.password != before.password:
                audit_record(action="user.password_set", actor=request.user, target=user, request=request,
                             details={"email": user.email, "usable_password": user.has_usable_password()})
        return response

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if not change:
            audit_record(action="user.create", actor=request.user, target=obj, request=request,
                         details={"email": obj.email})
            return
        changed = [name for name in form.changed_data if name in self.AUDITED or name in ("groups", "user_permissions")]
        if changed:
            audit_record(action="user.update", actor=request.user, target=obj, request=request,
                         details={"email": obj.email, "changed": changed,
                                  **{name: str(getattr(obj, name)) for name in changed if name in self.AUDITED}})


REASON = forms.CharField(max_length=500, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
                         help_text=gettext_lazy("Kept in the organization's audit log."))


class MemberAddForm(ActionForm):
    email = forms.EmailField(help_text=gettext_lazy("An existing Cardmix account."))
    role = forms.ChoiceField(choices=Role.choices)
    reason = REASON


class MemberRoleForm(ActionForm):
    role = forms.ChoiceField(choices=Role.choices)
    reason = REASON


class MemberRemoveForm(ActionForm):
    reason = forms.CharField(max_length=500, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
                             help_text=gettext_lazy("Their API tokens in the organization are revoked. Kept in the audit log."))


class OrganizationAddForm(forms.ModelForm):
    """A new organization needs its first owner (an existing account); without one nobody could manage it."""

    owner_email = forms.EmailField(label=gettext_lazy("Owner email"), help_text=gettext_lazy("An existing Cardmix account; they become its owner."))

    class Meta:
        model = Organization
        fields = ["name", "slug", "is_personal", "card_quota"]

    def clean_owner_email(self):
        email = normalize_email(self.cleaned_data.get("owner_email"))
        if not User.objects.filter(email=email, is_active=True).exists():
            raise forms.ValidationError(gettext("No active Cardmix account uses this email address; ask them to sign up first."))
        return email


class MembershipInline(ReadOnlyInline):
    """Shown, never edited here: members change through the Memberships actions (member_role_change,
    member_remove: the last owner stays, a removed member's tokens are revoked, each change audited)."""

    model = Membership
    fields = ["user", "role", "created_at"]
    readonly_fields = fields


@admin.register(Organization)
class OrganizationAdmin(ServiceRefusalMixin, admin.ModelAdmin):
    list_display = ["name", "slug", "card_quota", "is_personal", "real_name_verified_at", "created_at"]
    search_fields = ["name", "slug"]
    fields = ["name", "slug", "is_personal", "card_quota", "members_link", "real_name_verified_at", "created_at"]
    readonly_fields = ["members_link", "real_name_verified_at", "created_at"]
    inlines = [MembershipInline]
    actions = ["add_member"]

    def has_delete_permission(self, request, obj=None):
        return False  # it owns instances, ledger accounts, invoices and the audit log

    def get_fields(self, request, obj=None):
        return ["name", "slug", "is_personal", "card_quota", "owner_email"] if obj is None else self.fields

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = OrganizationAddForm
        return super().get_form(request, obj, **kwargs)

    @admin.display(description=gettext_lazy("members"))
    def members_link(self, obj):
        if obj is None or obj.pk is None:
            return "—"
        url = reverse("admin:tenancy_membership_changelist") + f"?organization__id__exact={obj.pk}"
        return format_html('<a href="{}">{}</a> {}', url, gettext("Change roles or remove members"),
                           gettext('(add one: the organizations list\'s "Add a member" action)'))

    def save_model(self, request, obj, form, change):
        """Created with its first owner through organization_create (audited); the quota through
        organization_quota_set (row lock, audited); other fields saved and audited here."""
        if not change:
            data = form.cleaned_data
            org = services.organization_create(operator=request.user, name=obj.name, slug=obj.slug,
                                               is_personal=obj.is_personal, card_quota=obj.card_quota,
                                               owner_email=data["owner_email"], request=request)
            obj.pk, obj.created_at, obj._state.adding, obj._state.db = org.pk, org.created_at, False, org._state.db
            return
        others = [name for name in form.changed_data if name != "card_quota"]
        if others:
            try:
                with transaction.atomic():
                    obj.save(update_fields=others)
            except IntegrityError:  # another organization took the slug after the form checked it
                raise ValidationFailed(gettext("The organization is invalid."),
                                       details={"slug": [gettext("An organization with this slug exists.")]}) from None
            audit_record(action="organization.update", org=obj, actor=request.user, target=obj, request=request,
                         details={name: {"old": form.initial.get(name), "new": getattr(obj, name)} for name in others})
        if "card_quota" in form.changed_data:
            services.organization_quota_set(org=obj, card_quota=obj.card_quota, actor=request.user, request=request)

    @admin.action(description=gettext_lazy("Add a member to the selected organization…"))
    def add_member(self, request, queryset):
        orgs = list(queryset.order_by("name")[:2])
        if len(orgs) != 1:
            self.message_user(request, gettext("Select exactly one organization to add a member to."), messages.ERROR)
            return None
        org = orgs[0]

        def apply(data):
            try:
                membership = services.member_invite(operator=request.user, org=org, email=data["email"],
                                                    role=data["role"], reason=data["reason"], request=request)
            except ServiceError as exc:
                return gettext("No member added."), [f"{org.slug}: {exc.message}"]
            return gettext("%(email)s added to %(org)s as %(role)s.") % {
                "email": membership.user.email, "org": org.slug, "role": membership.get_role_display()}, []

        return form_action(self, request, label=gettext("Add a member"), form_class=MemberAddForm,
                           items=[(org.pk, f"{org.name} ({org.slug})")], apply=apply,
                           permission="tenancy.change_membership")


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdmin):
    """Memberships are read here and changed only through the member services, as in the console: an operator's
    role change or removal keeps the organization's last owner, revokes a removed member's API tokens and is
    audited with the operator as actor and the reason given."""

    list_display = ["user", "organization", "role", "created_at"]
    list_filter = ["role"]
    list_select_related = ["user", "organization"]
    search_fields = ["user__email", "organization__slug", "organization__name"]
    fields = ["user", "organization", "role", "created_at"]
    actions = ["change_role", "remove_members"]

    def _items(self, queryset):
        return [(m.pk, f"{m.user.email} in {m.organization.slug} ({m.role})")
                for m in queryset.select_related("user", "organization").order_by("organization__slug", "user__email")]

    def _each(self, request, queryset, label, call):
        def apply(data):
            done, refused = 0, []
            for membership in queryset.select_related("user", "organization").order_by("pk"):
                try:
                    call(membership, data)
                    done += 1
                except ServiceError as exc:
                    refused.append(f"{membership.user.email} in {membership.organization.slug}: {exc.message}")
            return gettext("%(label)s: %(count)s membership(s) changed.") % {"label": label, "count": done}, refused

        return apply

    @admin.action(description=gettext_lazy("Change the role of selected members…"))
    def change_role(self, request, queryset):
        apply = self._each(request, queryset, gettext("Change role"), lambda m, data: services.member_role_change(
            operator=request.user, membership=m, role=data["role"], reason=data["reason"], request=request))
        return form_action(self, request, label=gettext("Change role"), form_class=MemberRoleForm,
                           items=self._items(queryset), apply=apply,
                           permission="tenancy.change_membership")

    @admin.action(description=gettext_lazy("Remove selected members…"))
    def remove_members(self, request, queryset):
        apply = self._each(request, queryset, gettext("Remove"), lambda m, data: services.member_remove(
            operator=request.user, membership=m, reason=data["reason"], request=request))
        return form_action(self, request, label=gettext("Remove members"), form_class=MemberRemoveForm,
                           items=self._items(queryset), apply=apply,
                           permission="tenancy.change_membership")


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

    @admin.action(description=gettext_lazy("Revoke selected tokens (they stop authenticating at once)"))
    def revoke(self, request, queryset):
        # ReadOnlyAdmin: has_change_permission is False for everyone, so the admin offers this action to any
        # staff who may view tokens; revoking cuts a customer's API access off, so it needs the change permission.
        if not request.user.has_perm("tenancy.change_apitoken"):
            self.message_user(request, gettext("You may not revoke API tokens."), messages.ERROR)
            return None
        revoked = 0
        for token in queryset.filter(revoked_at__isnull=True).select_related("organization").order_by("pk"):
            token_revoke(token=token, actor=request.user, request=request)
            revoked += 1
        self.message_user(request, gettext("%(count)s token(s) revoked.") % {"count": revoked}, messages.SUCCESS)


@admin.register(SshKey)
class SshKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "key_type", "fingerprint", "created_at"]
    list_select_related = ["user"]
    search_fields = ["name", "user__email", "fingerprint"]
    readonly_fields = ["key_type", "fingerprint", "public_key", "user", "created_at"]


@admin.register(TrialClaim)
class TrialClaimAdmin(ReadOnlyAdmin):
    """One trial per verified mailbox, ever: read-only (deleting a claim would grant the trial again)."""

    list_display = ["email", "mailbox", "user", "organization", "claimed_at"]
    list_select_related = ["user", "organization"]
    search_fields = ["email", "mailbox"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """Append-only: read, never edit."""

    list_display = ["created_at", "action", "organization", "actor", "target_type", "target_id", "ip"]
    list_filter = ["action"]
    list_select_related = ["organization", "actor"]
    search_fields = ["action", "target_id", "actor__email", "organization__slug", "request_id"]



@admin.register(SsoBinding)
class SsoBindingAdmin(ReadOnlyAdmin):
    """Owners ask for bindings (console, API); an operator approves one after checking the organization speaks
    for the domain or identity provider (sso_binding_approve, audited)."""

    list_display = ["organization", "kind", "value", "role", "created_by", "created_at", "approved_at", "approved_by"]
    list_filter = ["kind", ("approved_at", admin.EmptyFieldListFilter)]
    list_select_related = ["organization", "created_by", "approved_by"]
    search_fields = ["value", "organization__slug", "organization__name"]
    actions = ["approve"]

    @admin.action(description=gettext_lazy("Approve selected SSO bindings (newcomers from the domain or IdP join)"))
    def approve(self, request, queryset):
        if not request.user.has_perm("tenancy.change_ssobinding"):
            self.message_user(request, gettext("You may not approve SSO bindings."), messages.ERROR)
            return None
        approved = 0
        for binding in queryset.filter(approved_at__isnull=True).order_by("pk"):
            try:
                sso_binding_approve(operator=request.user, binding=binding, request=request)
            except ServiceError as exc:
                self.message_user(request, f"{binding.value}: {exc.message}", messages.ERROR)
            else:
                approved += 1
        self.message_user(request, gettext("%(count)s binding(s) approved.") % {"count": approved}, messages.SUCCESS)


from .realname import admin as _realname_admin  # noqa: E402,F401  (real-name verification)
