"""Leaving: the organization's export (owners and admins), and deleting one's account — the password, then a
link emailed to the address, then a last confirmation on the link's page."""
from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET, require_http_methods

from core.errors import ServiceError
from privacy.api import export_response
from privacy.deletion import account_delete, account_deletion_request, deletion_blockers, deletion_token_user

from ..forms import attach_service_error
from .access import require_capability


class DeletionForm(forms.Form):
    password = forms.CharField(label=_("Your password"), widget=forms.PasswordInput, strip=False)


@login_required
@require_GET
def organization_export(request):
    require_capability(request, "read_audit")
    return export_response(org=request.org, actor=request.user, request=request)


@login_required
@require_http_methods(["GET", "POST"])
def account_delete_page(request):
    form = DeletionForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            account_deletion_request(user=request.user, password=form.cleaned_data["password"],
                                     site_url=settings.SITE_URL, request=request)
        except ServiceError as exc:
            attach_service_error(form, exc)
        else:
            messages.info(request, _("We sent a confirmation link to %(email)s; it is valid for 24 hours.")
                          % {"email": request.user.email})
            return redirect("console:account_delete")
    return render(request, "console/account/delete.html",
                  {"form": form, "blockers": deletion_blockers(request.user)})


@require_http_methods(["GET", "POST"])
def account_delete_confirm(request, token):
    try:
        user = deletion_token_user(token)
    except ServiceError as exc:
        return render(request, "console/account/delete_confirm.html", {"error": exc.message}, status=400)
    if request.method == "POST":
        try:
            account_delete(user=user, request=request)
        except ServiceError as exc:
            return render(request, "console/account/delete_confirm.html", {"error": exc.message, "email": user.email},
                          status=409)
        logout(request)
        return render(request, "console/account/delete_confirm.html", {"deleted": True})
    return render(request, "console/account/delete_confirm.html", {"email": user.email, "token": token})
