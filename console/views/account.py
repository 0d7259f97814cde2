"""Account pages: sign-up, email verification, login, password reset (allauth's), organizations, members, tokens,
SSH keys."""
import uuid
from datetime import datetime, time, timedelta

from allauth.account.models import EmailConfirmationHMAC
from allauth.account.utils import user_pk_to_url_str
from allauth.account.views import LoginView as AllauthLoginView
from allauth.account.views import PasswordResetView as AllauthPasswordResetView
from allauth.account.views import SignupView as AllauthSignupView
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlsafe_base64_decode
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from billing.zone import billing_tz
from core.errors import ServiceError
from tenancy import selectors, services
from tenancy.allauth_adapters import email_address_of
from tenancy.choices import Role
from tenancy.models import TokenScope, User
from tenancy.permissions import request_can
from tenancy.throttles import LoginRateThrottle, SignupRateThrottle
from tenancy.verification import legacy_link_user

from ..forms import form_errors_add, no_maxlength
from .confirm import confirm_page

SSH_UPLOAD_MAX_BYTES = 16_384


def _throttled(request, throttle_class) -> bool:
    """Per-IP rate limit on a console form POST (the same rates as the API's throttles)."""
    return request.method == "POST" and not throttle_class().allow_request(request, None)


def _too_many(request):
    return render(request, "console/account/throttled.html", status=429)


def _back_to(request, name: str):
    # After a confirmed action htmx posted: a full page load of `name` (with its message), not a page in the row.
    url = reverse(name)
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


# --- Sign-up, verification, login, password reset: django-allauth's views -------------------------

class SignupView(AllauthSignupView):
    """allauth's sign-up (tenancy.allauth_forms.SignupForm; the adapter's save_user makes the account), plus the
    console's per-IP rate limit; a signed-in person goes to the dashboard."""

    def dispatch(self, request, *args, **kwargs):
        if request.user.is_authenticated:
            return redirect("console:dashboard")
        if _throttled(request, SignupRateThrottle):
            return _too_many(request)
        return super().dispatch(request, *args, **kwargs)

    def form_valid(self, form):
        try:
            return super().form_valid(form)
        except ServiceError as exc:  # the service's own refusals: a refused domain, a concurrent sign-up
            form_errors_add(form, exc)
            return self.form_invalid(form)


@login_required
def check_email(request):
    """"Check your email"; POST sends the link again."""
    if request.method == "POST" and request.user.email_verified_at is None:
        if _throttled(request, SignupRateThrottle):
            return _too_many(request)
        email_address_of(request.user).send_confirmation(request)
        messages.info(request, gettext("We sent the verification link again."))
        return redirect("console:check_email")
    return render(request, "console/account/check_email.html")


def verify_email_legacy(request, token):
    """A link mailed before allauth: allauth's confirmation of the address it names (the same trial rule)."""
    user = legacy_link_user(token)
    if user is None:
        return render(request, "account/email_confirm.html", {"confirmation": None}, status=400)
    return redirect("account_confirm_email", key=EmailConfirmationHMAC(email_address_of(user)).key)


class LoginView(AllauthLoginView):
    """allauth's login: password (authenticate(request=…), so django-axes counts failures), then the second
    factor when the account has one; a passkey; SSO. Plus the console's per-IP rate limit."""

    template_name = "account/login.html"

    def post(self, request, *args, **kwargs):
        if _throttled(request, LoginRateThrottle):
            return _too_many(request)
        return super().post(request, *args, **kwargs)


class PasswordResetView(AllauthPasswordResetView):
    """allauth's reset request (the link goes to SITE_URL, in the account's language: the adapter), plus the
    console's per-IP rate limit."""

    def post(self, request, *args, **kwargs):
        if _throttled(request, SignupRateThrottle):
            return _too_many(request)
        return super().post(request, *args, **kwargs)


def password_reset_legacy(request, uidb64, token):
    """A reset link mailed before allauth (Django's base64 user id): allauth's page for the same token."""
    try:
        uid = user_pk_to_url_str(User(pk=uuid.UUID(urlsafe_base64_decode(uidb64).decode())))
    except (ValueError, UnicodeDecodeError):
        uid = "0"  # allauth's page then says the link is invalid
    return redirect("account_reset_password_from_key", uidb36=uid, key=token)


# --- Organizations and members --------------------------------------------------------------------

@login_required
def organizations(request):
    """The user's organizations, with a switch button each."""
    return render(request, "console/account/organizations.html",
                  {"memberships": selectors.memberships_of_user(user=request.user)})


@login_required
@require_POST
def organization_switch(request):
    try:
        membership = services.organization_switch(request=request, org_id=request.POST.get("organization", ""))
    except (Http404, DjangoValidationError):  # not a member, or not an id at all
        messages.error(request, gettext("You are not a member of that organization."))
        return redirect("console:organizations")
    messages.success(request, gettext('Now working in %(name)s.') % {'name': membership.organization.name})
    return redirect("console:dashboard")


class InviteForm(forms.Form):
    email = forms.EmailField()
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


def _membership_or_redirect(request):
    if request.membership is None:
        messages.error(request, gettext("You are not a member of any organization."))
        return None
    return request.membership


@login_required
def members(request):
    """Members of the current organization; owners and admins invite, change roles and remove."""
    if _membership_or_redirect(request) is None:
        return redirect("console:dashboard")
    form = InviteForm(request.POST or None)
    can_manage = request_can(request, "members_manage")
    actor_is_owner = request.membership.role == Role.OWNER
    roles = [(v, label) for v, label in Role.choices if actor_is_owner or v != Role.OWNER]  # owners make owners
    form.fields["role"].choices = roles
    if request.method == "POST":
        if not can_manage:
            messages.error(request, gettext("Your role does not allow managing members."))
            return redirect("console:members")
        if form.is_valid():
            try:
                services.member_invite(actor_membership=request.membership, request=request, **form.cleaned_data)
            except ServiceError as exc:
                form_errors_add(form, exc)
            else:
                messages.success(request, gettext('Added %(cleaned_data)s.') % {'cleaned_data': form.cleaned_data['email']})
                return redirect("console:members")
    members = list(selectors.member_list(org=request.org))
    owners = sum(1 for m in members if m.role == Role.OWNER)
    for m in members:
        # The last owner can be neither demoted nor removed (the service refuses): offer no control that would fail.
        m.sole_owner = m.role == Role.OWNER and owners == 1
        m.manageable = _can_manage_member(request, m) and not m.sole_owner
    return render(request, "console/account/members.html", {
        "members": members, "form": form, "can_manage": can_manage, "roles": roles,
    })


def _can_manage_member(request, membership) -> bool:
    """Whether this request may change or remove `membership`: only owners manage owners, so an admin gets no
    controls (or confirmation page) it could only fail with."""
    return request_can(request, "members_manage") and (
        request.membership.role == Role.OWNER or membership.role != Role.OWNER)


@login_required
@require_POST
def member_update(request, id):
    """Change a member's role (`role` in the form); removal is member_remove (it asks first)."""
    if _membership_or_redirect(request) is None:
        return redirect("console:dashboard")
    target = selectors.member_get(org=request.org, id=id)
    try:
        services.member_role_change(actor_membership=request.membership, membership=target,
                                    role=request.POST.get("role", ""), request=request)
        messages.success(request, gettext('%(email)s is now %(get)s.') % {'email': target.user.email, 'get': request.POST.get('role')})
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("console:members")


@login_required
@require_http_methods(["GET", "POST"])
def member_remove(request, id):
    """POST removes a member; GET is the confirmation page its Remove button leads to without JavaScript."""
    if _membership_or_redirect(request) is None:
        return redirect("console:dashboard")
    target = selectors.member_get(org=request.org, id=id)  # another organization's member: 404
    if request.method == "GET":
        if not _can_manage_member(request, target):
            raise PermissionDenied(gettext("Your role does not allow removing this member."))
        if target.role == Role.OWNER and not selectors.member_list(org=request.org).filter(
                role=Role.OWNER).exclude(pk=target.pk).exists():
            messages.error(request, gettext("The organization's last owner cannot be removed: make another member an owner "
                                    "first."))
            return redirect("console:members")
        return confirm_page(request, title=gettext('Remove %(email)s from %(name)s?') % {'email': target.user.email, 'name': request.org.name}, label=gettext("Remove"),
                            cancel=reverse("console:members"),
                            detail=gettext("They lose access to the organization at once and their API tokens in it are "
                                   "revoked. You can add them again later."))
    try:  # the service checks the role (and the last owner) under the organization's lock
        services.member_remove(actor_membership=request.membership, membership=target, request=request)
    except ServiceError as exc:
        messages.error(request, exc.message)
        return _back_to(request, "console:members")
    messages.success(request, gettext('Removed %(email)s.') % {'email': target.user.email})
    if target.user_id == request.user.id:  # left the organization: its members page is gone
        return _back_to(request, "console:dashboard")
    return _back_to(request, "console:members")


# --- API tokens -------------------------------------------------------------------------------

class TokenForm(forms.Form):
    name = no_maxlength(forms.CharField(max_length=100))
    # Read by default: a token made for a dashboard or a script that only looks should not be able to create.
    scope = forms.ChoiceField(choices=TokenScope.choices, initial=TokenScope.READ)
    expires_at = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}),
                                 help_text=gettext_lazy("Optional: the token stops working at 00:00 on this day."))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["expires_at"].widget.attrs["min"] = (_today() + timedelta(days=1)).isoformat()

    def clean_expires_at(self):
        """A day after today, as the start of that day in the zone the console shows every time in (not UTC)."""
        day = self.cleaned_data.get("expires_at")
        if day is None:
            return None
        if day <= _today():
            raise forms.ValidationError(gettext("Pick a day after today (the token stops working at 00:00 that day)."))
        return datetime.combine(day, time.min, tzinfo=billing_tz())


def _today():
    return timezone.localtime(timezone.now(), billing_tz()).date()


@login_required
def tokens(request):
    """One's API tokens in the current organization; a new token's secret is shown on this response only."""
    if _membership_or_redirect(request) is None:
        return redirect("console:dashboard")
    form = TokenForm(request.POST or None)
    secret = None
    if request.method == "POST" and form.is_valid():
        try:
            _, secret = services.token_create(membership=request.membership, request=request, **form.cleaned_data)
        except ServiceError as exc:
            form_errors_add(form, exc)
        else:
            form = TokenForm()
    response = render(request, "console/account/tokens.html", {
        "tokens": selectors.token_list(org=request.org, user=request.user), "form": form, "secret": secret})
    if secret:
        response["Cache-Control"] = "no-store"
    return response


@login_required
@require_http_methods(["GET", "POST"])
def token_revoke(request, id):
    """POST revokes one's token; GET is the confirmation page its Revoke button leads to without JavaScript."""
    if _membership_or_redirect(request) is None:
        return redirect("console:dashboard")
    token = selectors.token_get(org=request.org, user=request.user, id=id)
    if request.method == "GET":
        return confirm_page(request, title=gettext('Revoke the token %(name)s (%(prefix)s…)?') % {'name': token.name, 'prefix': token.prefix}, label=gettext("Revoke"),
                            cancel=reverse("console:tokens"),
                            detail=gettext("Scripts and tools that use it stop working at once; a revoked token cannot "
                                   "be restored."))
    services.token_revoke(token=token, actor=request.user, request=request)
    messages.success(request, gettext('Revoked %(name)s (%(prefix)s…).') % {'name': token.name, 'prefix': token.prefix})
    return _back_to(request, "console:tokens")


# --- SSH keys ---------------------------------------------------------------------------------

class SshKeyForm(forms.Form):
    name = no_maxlength(forms.CharField(max_length=100))
    public_key = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False,
                                 help_text=gettext_lazy("Paste the contents of your .pub file…"))
    key_file = forms.FileField(required=False, help_text=gettext_lazy("…or upload it."))

    def clean(self):
        data = super().clean()
        upload = data.get("key_file")
        if upload:
            if upload.size > SSH_UPLOAD_MAX_BYTES:
                raise forms.ValidationError(gettext("The file is too large for a public key."))
            try:
                data["public_key"] = upload.read().decode("utf-8").strip()
            except UnicodeDecodeError:
                raise forms.ValidationError(gettext("The file is not a text public key.")) from None
        if not data.get("public_key"):
            raise forms.ValidationError(gettext("Paste a public key or upload a .pub file."))
        return data


def _can_manage_ssh_keys(request) -> bool:
    """The role matrix as the API applies it: viewers and billing members do not add or delete keys."""
    return request.membership is None or request_can(request, "ssh_keys")


@login_required
def ssh_keys(request):
    """One's SSH keys (usable in every organization)."""
    form = SshKeyForm(request.POST or None, request.FILES or None)
    can_manage = _can_manage_ssh_keys(request)
    if request.method == "POST":
        if not can_manage:
            messages.error(request, gettext("Your role does not allow adding SSH keys."))
            return redirect("console:ssh_keys")
        if form.is_valid():
            try:
                services.ssh_key_add(user=request.user, org=request.org, request=request,
                                     name=form.cleaned_data["name"], public_key=form.cleaned_data["public_key"])
            except ServiceError as exc:
                form_errors_add(form, exc)
            else:
                messages.success(request, gettext("SSH key added."))
                return redirect("console:ssh_keys")
    return render(request, "console/account/ssh_keys.html",
                  {"keys": selectors.ssh_key_list(user=request.user), "form": form, "can_manage": can_manage})


@login_required
@require_http_methods(["GET", "POST"])
def ssh_key_delete(request, id):
    """POST deletes one's key; GET is the confirmation page its Delete button leads to without JavaScript."""
    key = selectors.ssh_key_get(user=request.user, id=id)
    if not _can_manage_ssh_keys(request):
        messages.error(request, gettext("Your role does not allow deleting SSH keys."))
        return _back_to(request, "console:ssh_keys")
    if request.method == "GET":
        return confirm_page(request, title=gettext('Delete the SSH key %(name)s?') % {'name': key.name}, label=gettext("Delete"),
                            cancel=reverse("console:ssh_keys"),
                            detail=gettext('Fingerprint %(fingerprint)s. Instances that already have it keep it; new instances cannot use it.') % {'fingerprint': key.fingerprint})
    services.ssh_key_delete(key=key, actor=request.user, org=request.org, request=request)
    messages.success(request, gettext('Deleted %(name)s.') % {'name': key.name})
    return _back_to(request, "console:ssh_keys")
