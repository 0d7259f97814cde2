"""Fapiao in the console: what is left to invoice, the organization's requests with their state (and the PDF once
issued), the request form for owners, admins and billing members, and cancelling a request not yet issued."""
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from billing.fapiao.api import fapiao_pdf_response
from billing.fapiao.selectors import fapiao_get, fapiao_list, invoiceable
from billing.fapiao.services import fapiao_cancel, fapiao_request
from billing.models_fapiao import FapiaoKind
from core.errors import ServiceError
from core.money import MoneyError, format_fen, parse_cny
from tenancy.permissions import request_can

from ..forms import attach_service_error
from .access import or_404, require_capability, require_write


class FapiaoForm(forms.Form):
    kind = forms.ChoiceField(choices=FapiaoKind.choices, widget=forms.RadioSelect, initial=FapiaoKind.NORMAL)
    amount = forms.CharField(label=gettext_lazy("Amount (CNY)"), max_length=20, help_text=gettext_lazy('Whole fen, e.g. "300.00".'))
    title = forms.CharField(label=gettext_lazy("Buyer (抬头)"), max_length=100)
    taxpayer_id = forms.CharField(label=gettext_lazy("Taxpayer id (统一社会信用代码)"), max_length=18, required=False,
                                  help_text=gettext_lazy("18 characters; required for a 专用 fapiao and for companies."))
    address = forms.CharField(label=gettext_lazy("Registered address"), max_length=200, required=False)
    phone = forms.CharField(label=gettext_lazy("Registered phone"), max_length=30, required=False)
    bank_name = forms.CharField(label=gettext_lazy("Bank"), max_length=100, required=False)
    bank_account = forms.CharField(label=gettext_lazy("Bank account"), max_length=40, required=False)
    email = forms.EmailField(label=gettext_lazy("Send the e-fapiao to"), required=False)
    note = forms.CharField(label=gettext_lazy("Note"), max_length=200, required=False)

    def clean_amount(self):
        try:
            return parse_cny(self.cleaned_data["amount"], max_decimals=2)
        except MoneyError as exc:
            raise forms.ValidationError(str(exc)) from exc


@login_required
@require_http_methods(["GET", "POST"])
def fapiao_page(request):
    require_capability(request, "read_billing")
    can_request = request_can(request, "billing")
    figures = invoiceable(org=request.org)
    form = FapiaoForm(request.POST or None, initial={"email": request.user.email})
    if request.method == "POST":
        require_write(request, "billing")
        if form.is_valid():
            try:
                fapiao = fapiao_request(org=request.org, user=request.user, request=request, **form.cleaned_data)
            except ServiceError as exc:
                attach_service_error(form, exc)
            else:
                messages.success(request, gettext('Fapiao requested for %(format_fen)s; you get an email when it is issued.') % {'format_fen': format_fen(fapiao.amount)})
                return redirect("console:billing_fapiao")
    return render(request, "console/billing/fapiao.html", {
        "rows": list(fapiao_list(org=request.org)[:200]), "figures": figures, "form": form,
        "can_request": can_request})


@login_required
@require_POST
def fapiao_cancel_view(request, id):
    require_capability(request, "read_billing")
    fapiao = or_404(fapiao_get, org=request.org, id=id)
    require_write(request, "billing")
    try:
        fapiao_cancel(org=request.org, fapiao_id=fapiao.pk, actor=request.user, request=request)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, gettext('Request for %(title)s (%(format_fen)s) cancelled.') % {'title': fapiao.title, 'format_fen': format_fen(fapiao.amount)})
    return redirect("console:billing_fapiao")


@login_required
@require_GET
def fapiao_pdf(request, id):
    require_capability(request, "read_billing")
    return or_404(lambda **kw: fapiao_pdf_response(fapiao_get(with_pdf=True, **kw)), org=request.org, id=id)
