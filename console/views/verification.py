"""Real-name verification (实名认证) in the console: the organization's status, what an unverified organization
may not do yet, its submissions, and the form (owners and admins)."""
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils.functional import lazy
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods

from core.errors import ServiceError
from tenancy.models_realname import LICENCE_MAX_BYTES, RealNameKind
from tenancy.permissions import request_can
from tenancy.realname.policy import org_unverified, policy_summary
from tenancy.realname.selectors import realname_list
from tenancy.realname.services import realname_submit

from ..forms import attach_service_error
from .access import require_capability, require_write


class RealNameForm(forms.Form):
    kind = forms.ChoiceField(label=_("Who is verified"), choices=RealNameKind.choices, widget=forms.RadioSelect,
                             initial=RealNameKind.INDIVIDUAL)
    legal_name = forms.CharField(label=_("Registered name"), max_length=100,
                                 help_text=_("The person's name on the ID card, or the company's on its licence."))
    id_number = forms.CharField(label=_("Identification number (身份证号)"), max_length=18, required=False,
                                help_text=_("Individuals: 18 characters; stored encrypted, shown masked."))
    credit_code = forms.CharField(label=_("Unified social credit code (统一社会信用代码)"), max_length=18,
                                  required=False, help_text=_("Enterprises: 18 characters."))
    licence = forms.FileField(label=_("Business licence (营业执照)"), required=False,
                              help_text=lazy(lambda: gettext("Enterprises: PDF, PNG or JPEG, at most %(mib)d MiB.")
                                             % {"mib": LICENCE_MAX_BYTES // (1024 * 1024)}, str)())


@login_required
@require_http_methods(["GET", "POST"])
def verification_page(request):
    require_capability(request, "read_org")
    can_submit = request_can(request, "members_manage")
    form = RealNameForm(request.POST or None, request.FILES or None)
    if request.method == "POST":
        require_write(request, "members_manage")
        if form.is_valid():
            data = dict(form.cleaned_data)
            upload = data.pop("licence")
            try:
                if upload is not None and upload.size > LICENCE_MAX_BYTES:
                    data["licence"] = b"\0" * (LICENCE_MAX_BYTES + 1)  # the service names the limit
                else:
                    data["licence"] = upload.read() if upload is not None else None
                realname_submit(org=request.org, actor=request.user, request=request, **data)
            except ServiceError as exc:
                attach_service_error(form, exc)
            else:
                messages.success(request, _("Submitted for review; owners and admins get an email with the decision."))
                return redirect("console:verification")
    submissions = list(realname_list(org=request.org)[:20])
    current = submissions[0] if submissions else None
    return render(request, "console/account/verification.html", {
        "form": form, "can_submit": can_submit, "submissions": submissions,
        "current": current, "limited": org_unverified(request.org),
        "open_to_submit": request.org.real_name_verified_at is None and (current is None or current.state == "rejected"),
        "policy": policy_summary()})
