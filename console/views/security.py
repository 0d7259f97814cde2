"""Sign-in security: one's own second factor (django-allauth's pages under /accounts/2fa/), and for owners the
organization's rules: MFA required for every member, SSO bindings (email domain or IdP → join with a role)."""
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods

from core.errors import ServiceError
from tenancy import sso
from tenancy.choices import Role
from tenancy.mfa import organization_mfa_required_set, user_has_mfa
from tenancy.models import SsoBindingKind
from tenancy.permissions import request_can

from ..forms import form_errors_add
from .account import _back_to
from .confirm import confirm_page


class MfaRequiredForm(forms.Form):
    mfa_required = forms.BooleanField(required=False, label=gettext_lazy(
        "Require two-factor authentication for every member"))


class SsoBindingForm(forms.Form):
    kind = forms.ChoiceField(choices=[(SsoBindingKind.EMAIL_DOMAIN, gettext_lazy("Email domain")),
                                      (SsoBindingKind.IDP, gettext_lazy("Identity provider"))])
    value = forms.CharField(max_length=253, label=gettext_lazy("Domain or identity provider id"))
    role = forms.ChoiceField(choices=[c for c in Role.choices if c[0] != Role.OWNER], initial=Role.MEMBER)


@login_required
def security(request):
    """Everyone: their own two-factor status. Owners: require MFA, add SSO bindings; admins see the bindings."""
    if request.membership is None:
        return redirect("console:dashboard")
    is_owner = request_can(request, "sign_in_rules")
    mfa_form = MfaRequiredForm(initial={"mfa_required": request.org.mfa_required})
    sso_form = SsoBindingForm()
    if request.method == "POST":
        if not is_owner:
            raise PermissionDenied(_("Only owners change the organization's sign-in rules."))
        if "value" in request.POST:
            sso_form = SsoBindingForm(request.POST)
            if sso_form.is_valid():
                try:
                    sso.sso_binding_create(actor_membership=request.membership, request=request,
                                           **sso_form.cleaned_data)
                except ServiceError as exc:
                    form_errors_add(sso_form, exc)
                else:
                    messages.success(request, _("Binding added: it applies once an operator approves it."))
                    return redirect("console:security")
        else:
            mfa_form = MfaRequiredForm(request.POST)
            if mfa_form.is_valid():
                required = mfa_form.cleaned_data["mfa_required"]
                organization_mfa_required_set(actor_membership=request.membership, required=required,
                                              request=request)
                messages.success(request, _("Every member now needs two-factor authentication.") if required
                                 else _("Two-factor authentication is now optional."))
                return redirect("console:security")
    can_read = request_can(request, "read_sign_in")
    return render(request, "console/account/security.html", {
        "has_mfa": user_has_mfa(user=request.user), "is_owner": is_owner, "can_read": can_read,
        "mfa_form": mfa_form, "sso_form": sso_form,
        "bindings": list(sso.sso_binding_list(org=request.org)) if can_read else [],
        "providers": sso.sso_providers(request) if is_owner else [],
    })


@login_required
@require_http_methods(["GET", "POST"])
def sso_binding_delete(request, id):
    """POST removes a binding; GET is the confirmation page its Remove button leads to without JavaScript."""
    if request.membership is None:
        return redirect("console:dashboard")
    binding = sso.sso_binding_get(org=request.org, id=id)  # another organization's: 404
    if not request_can(request, "sign_in_rules"):
        raise PermissionDenied(_("Only owners change the organization's sign-in rules."))
    if request.method == "GET":
        return confirm_page(request, title=_("Remove the SSO binding %(value)s?") % {"value": binding.value},
                            label=_("Remove"), cancel=reverse("console:security"),
                            detail=_("People signing in through SSO no longer join this organization by it; "
                                     "members who joined stay."))
    sso.sso_binding_delete(actor_membership=request.membership, binding=binding, request=request)
    messages.success(request, _("Removed the binding %(value)s.") % {"value": binding.value})
    return _back_to(request, "console:security")
