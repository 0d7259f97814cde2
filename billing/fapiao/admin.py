"""Operators' admin for fapiao requests: the buyer's details as asked, then *issue* (number + PDF upload) or
*reject* (a reason the customer sees) on the request's own page; both go through the services (audited, emailed).
Issued fapiao that a later refund left above what was paid are listed under "red-letter needed"."""
from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_lazy

from core.admin import cny_display
from core.errors import ServiceError

from ..models_fapiao import PDF_MAX_BYTES, FapiaoRequest, FapiaoState
from .api import fapiao_pdf_response
from .services import fapiao_issue, fapiao_reject

ISSUE, REJECT = "issue", "reject"


class FapiaoDecisionForm(forms.ModelForm):
    """The decision on a request; its fields are not the model's, the services write the row."""

    decision = forms.ChoiceField(choices=[("", "—"), (ISSUE, "Issue"), (REJECT, "Reject")], required=False)
    issued_number = forms.CharField(label=gettext_lazy("Fapiao number"), max_length=20, required=False)
    pdf_file = forms.FileField(label=gettext_lazy("Fapiao PDF"), required=False,
                               help_text=gettext('The issued fapiao as a PDF (at most %(PDF_MAX_BYTES)s MiB).') % {'PDF_MAX_BYTES': PDF_MAX_BYTES // (1024 * 1024)})
    reject_reason = forms.CharField(label=gettext_lazy("Reason (shown to the customer)"), max_length=300, required=False,
                                    widget=forms.Textarea(attrs={"rows": 3, "cols": 60}))

    class Meta:
        model = FapiaoRequest
        fields: list = []

    def clean(self):
        data = super().clean()
        if data.get("decision") == ISSUE and not (data.get("issued_number") and data.get("pdf_file")):
            raise forms.ValidationError(gettext("Issuing needs the fapiao number and its PDF."))
        if data.get("decision") == REJECT and not (data.get("reject_reason") or "").strip():
            raise forms.ValidationError(gettext("Rejecting needs the reason the customer will read."))
        return data


class RedLetterFilter(admin.SimpleListFilter):
    title = "red-letter reversal"
    parameter_name = "red_letter"

    def lookups(self, request, model_admin):
        return [("needed", "needed")]

    def queryset(self, request, queryset):
        return queryset.filter(red_letter_amount__gt=0) if self.value() == "needed" else queryset


@admin.register(FapiaoRequest)
class FapiaoRequestAdmin(admin.ModelAdmin):
    form = FapiaoDecisionForm
    list_display = ["title", "organization", "kind", "amount_cny", "state", "number", "red_letter_cny", "created_at"]
    list_filter = ["state", "kind", RedLetterFilter]
    list_select_related = ["organization"]
    search_fields = ["title", "taxpayer_id", "number", "organization__slug", "organization__name"]
    amount_cny = cny_display("amount", gettext_lazy("amount (CNY)"))
    red_letter_cny = cny_display("red_letter_amount", gettext_lazy("red-letter needed (CNY)"))
    readonly_fields = ["organization", "requested_by", "kind", "amount_cny", "title", "taxpayer_id", "address",
                       "phone", "bank_name", "bank_account", "email", "note", "state", "number", "pdf_link", "reason",
                       "decided_by", "decided_at", "red_letter_cny", "red_letter_flagged_at", "created_at"]

    def get_fields(self, request, obj=None):
        decision = ["decision", "issued_number", "pdf_file", "reject_reason"]
        return self.readonly_fields + (decision if obj is not None and obj.state == FapiaoState.REQUESTED else [])

    @admin.display(description=gettext_lazy("PDF"))
    def pdf_link(self, obj):
        if obj.state != FapiaoState.ISSUED:
            return "—"
        url = reverse("admin:billing_fapiaorequest_pdf", args=[obj.pk])
        return format_html('<a href="{}">fapiao-{}.pdf</a> (the customer downloads it from the console)', url,
                           obj.number)

    def get_urls(self):
        pdf = self.admin_site.admin_view(self.pdf_view)
        return [path("<uuid:pk>/pdf/", pdf, name="billing_fapiaorequest_pdf"), *super().get_urls()]

    def pdf_view(self, request, pk):
        if not self.has_view_permission(request):
            return HttpResponseRedirect(reverse("admin:index"))
        return fapiao_pdf_response(get_object_or_404(FapiaoRequest, pk=pk, state=FapiaoState.ISSUED))

    def has_add_permission(self, request):
        return False  # customers ask; operators decide

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        try:
            if data.get("decision") == ISSUE:
                upload = data.get("pdf_file")
                fapiao_issue(fapiao_id=obj.pk, number=data.get("issued_number", ""),
                             pdf=upload.read() if upload else b"", actor=request.user, request=request)
            elif data.get("decision") == REJECT:
                fapiao_reject(fapiao_id=obj.pk, reason=data.get("reject_reason", ""), actor=request.user,
                              request=request)
        except ServiceError as exc:
            details = "; ".join(f"{k}: {' '.join(v)}" for k, v in (exc.details or {}).items())
            self.message_user(request, (gettext("Not saved: %(message)s") % {"message": exc.message}
                                        + f" {details}").strip(), messages.ERROR)
            request.fapiao_refused = True

    def response_change(self, request, obj):
        if getattr(request, "fapiao_refused", False):  # back to the form with the refusal, not "changed successfully"
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)
