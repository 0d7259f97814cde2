"""Console pages of the billing products: monthly statements (HTML + CSV), sponsorship proposals, invoices."""
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext

from billing.products import selectors
from billing.products.postpaid import invoice_pay_amount
from billing.products.sponsorship import MAX_CARD_HOURS, sponsorship_submit
from billing.products.statement_formats import statement_csv
from billing.products.statements import statement_build, statement_months
from core.errors import NotFoundError, ServiceError, ValidationFailed
from inventory.models import Accelerator
from inventory.selectors import current_prices
from provisioning.selectors import instance_names
from tenancy.permissions import request_can

from ..catalog_names import accelerator_names
from .access import require_capability, require_write


def _statement_or_404(request, month: str):
    try:
        return statement_build(org=request.org, month=month)
    except (ValidationFailed, NotFoundError) as exc:
        raise Http404(str(exc)) from exc


@login_required
def statements(request):
    """Months with ledger activity, newest first."""
    require_capability(request, "read_billing")
    return render(request, "console/billing/statements.html", {"months": statement_months(org=request.org)})


@login_required
def statement_detail(request, month):
    """One month's statement; amounts rounded to the fen for display only."""
    require_capability(request, "read_billing")
    st = _statement_or_404(request, month)
    names = accelerator_names(u["accelerator"] for u in st.usage) if st.usage else {}
    instances = instance_names(org=request.org, ids=[r["instance_id"] for r in st.usage + st.packages])
    for row in st.usage + st.packages:
        row["instance_name"] = instances.get(row["instance_id"], "")
    for u in st.usage:
        u["accelerator_name"] = names.get(u["accelerator"], u["accelerator"])
    return render(request, "console/billing/statement_detail.html",
                  {"st": st, "link_instances": request_can(request, "read")})


@login_required
def statement_csv_download(request, month):
    """The same statement as the API's CSV (exact µCNY as 6-decimal CNY)."""
    require_capability(request, "read_billing")
    response = HttpResponse(statement_csv(_statement_or_404(request, month)), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="cardmix-statement-{month}.csv"'
    return response


class SponsorshipForm(forms.Form):
    title = forms.CharField(max_length=200)
    abstract = forms.CharField(widget=forms.Textarea(attrs={"rows": 6}), max_length=5000)
    accelerator = forms.ChoiceField(choices=())
    card_hours = forms.IntegerField(min_value=1, max_value=MAX_CARD_HOURS)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        priced = current_prices()  # grants are at list price: an unpriced accelerator cannot be sponsored
        self.fields["accelerator"].choices = [(slug, name) for slug, name in
                                              Accelerator.objects.order_by("slug").values_list("slug", "name")
                                              if slug in priced]


@login_required
def sponsorships(request):
    """The organization's proposals and, for owners, admins and billing members, the form to submit one."""
    require_capability(request, "read_billing")
    can_submit = request_can(request, "billing")
    form = SponsorshipForm(request.POST or None)
    if request.method == "POST":
        require_write(request, "billing")
        if form.is_valid():
            try:
                sponsorship_submit(org=request.org, user=request.user, request=request, **form.cleaned_data)
            except ServiceError as exc:
                for field, msgs in (exc.details or {None: [exc.message]}).items():
                    for msg in msgs:
                        form.add_error(field if field in form.fields else None, msg)
            else:
                messages.success(request, gettext("Proposal submitted; operators will review it."))
                return redirect("console:billing_sponsorships")
    proposals = list(selectors.sponsorship_list(org=request.org)[:200])
    names = accelerator_names(p.accelerator for p in proposals) if proposals else {}
    for p in proposals:
        p.accelerator_name = names.get(p.accelerator, p.accelerator)
    return render(request, "console/billing/sponsorships.html", {
        "proposals": proposals, "form": form, "can_submit": can_submit})


@login_required
def invoices(request):
    """Monthly invoices of a postpaid organization."""
    require_capability(request, "read_billing")
    rows = [(inv, invoice_pay_amount(inv)) for inv in selectors.invoice_list(org=request.org)[:200]]
    return render(request, "console/billing/invoices.html",
                  {"rows": rows, "can_pay": request_can(request, "billing")})
