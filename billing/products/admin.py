"""Operators' admin for the billing products: sponsorship decisions (with a note), packages, invoices.

Credit limits are edited on the ledger's BillingProfile admin (billing/admin.py, audited there)."""
from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.utils.translation import gettext, gettext_lazy

from core.admin import ReadOnlyAdmin, cny_display, cny_fields
from core.errors import ServiceError
from core.money import format_ucny

from ..models_products import Invoice, Package, SponsorshipProposal, SponsorshipState
from .sponsorship import sponsorship_approve, sponsorship_reject


class DecisionForm(forms.Form):
    note = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "cols": 60}), required=False,
                           help_text=gettext_lazy("Shown to the customer."))


def _decide(modeladmin, request, queryset, *, action: str, service, title: str, button: str, explanation: str):
    """Intermediate page: ask for a note, then apply `service` to every selected proposal."""
    form = DecisionForm(request.POST if "apply" in request.POST else None)
    if "apply" in request.POST and form.is_valid():
        done = 0
        for proposal in queryset.order_by("pk"):
            try:
                service(proposal_id=proposal.pk, actor=request.user, note=form.cleaned_data["note"], request=request)
                done += 1
            except ServiceError as exc:
                modeladmin.message_user(request, f"{proposal.title}: {exc.message}", messages.ERROR)
        modeladmin.message_user(request, gettext("%(count)s proposal(s) updated.") % {"count": done}, messages.SUCCESS)
        return None
    return TemplateResponse(request, "admin/billing/sponsorship_decide.html", {
        **modeladmin.admin_site.each_context(request), "title": title, "button": button, "explanation": explanation,
        "proposals": list(queryset.select_related("organization")), "form": form, "action": action,
        "opts": modeladmin.model._meta})


@admin.register(SponsorshipProposal)
class SponsorshipProposalAdmin(admin.ModelAdmin):
    """Approve (grant card-hours × list price into `grant`, once) or reject proposals with a note."""

    list_display = ["title", "organization", "accelerator", "card_hours", "state", "granted_cny", "created_at"]
    list_filter = ["state", "accelerator"]
    list_select_related = ["organization"]
    search_fields = ["title", "organization__slug", "organization__name"]
    # Decided through the actions only; the grant shown in CNY.
    fields = readonly_fields = cny_fields(SponsorshipProposal, ["granted_amount"])
    actions = ["approve", "reject"]
    granted_cny = granted_amount_cny = cny_display("granted_amount", gettext_lazy("granted (CNY)"))

    def has_add_permission(self, request):
        return False  # customers submit proposals

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description=gettext_lazy("Approve and grant the card-hours at list price"))
    def approve(self, request, queryset):
        return _decide(self, request, queryset.filter(state=SponsorshipState.SUBMITTED), action="approve",
                       service=sponsorship_approve, title=gettext("Approve sponsorship proposals"), button=gettext("Approve and grant"),
                       explanation=gettext("Each approval grants card-hours × the accelerator's current on-demand "
                                           "list price into the organization's grant account, once."))

    @admin.action(description=gettext_lazy("Reject with a note"))
    def reject(self, request, queryset):
        return _decide(self, request, queryset.filter(state=SponsorshipState.SUBMITTED), action="reject",
                       service=sponsorship_reject, title=gettext("Reject sponsorship proposals"), button=gettext("Reject"),
                       explanation=gettext("The note is shown to the customer."))


@admin.register(Package)
class PackageAdmin(ReadOnlyAdmin):
    """Monthly package periods (charged in full; ended by the renewal task)."""

    list_display = ["id", "organization", "instance_id", "period", "amount_cny", "renewal", "state", "outcome",
                    "starts_at", "ends_at"]
    list_filter = ["state", "renewal", "outcome"]
    list_select_related = ["organization"]
    search_fields = ["instance_id", "organization__slug"]
    fields = readonly_fields = ["items_cny" if name == "items" else name
                                for name in cny_fields(Package, ["amount", "rate_per_hour"])]
    amount_cny = cny_display("amount", gettext_lazy("amount (CNY)"))
    rate_per_hour_cny = cny_display("rate_per_hour", gettext_lazy("rate (CNY / hour)"))

    @admin.display(description=gettext_lazy("items"))
    def items_cny(self, obj):
        """Each item's locked monthly rate in CNY per card-hour (the JSON keeps µCNY)."""
        return "; ".join(gettext("%(cards)s × %(accelerator)s at %(rate)s CNY / card-hour") % {
            "cards": item.get("cards"), "accelerator": item.get("accelerator"),
            "rate": format_ucny(item["rate"]) if isinstance(item.get("rate"), int) else item.get("rate")}
            for item in obj.items or []) or "—"


@admin.register(Invoice)
class InvoiceAdmin(ReadOnlyAdmin):
    """Monthly invoices of postpaid organizations."""

    list_display = ["organization", "period", "amount_due_cny", "state", "topup_id", "paid_at"]
    list_filter = ["state"]
    list_select_related = ["organization"]
    search_fields = ["organization__slug", "organization__name"]
    fields = readonly_fields = cny_fields(Invoice, ["amount_due"])
    amount_due_cny = cny_display("amount_due", gettext_lazy("amount due (CNY)"))
