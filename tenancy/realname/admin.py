"""Operators' admin for real-name verifications: what was submitted (the identification number masked, the licence
as a download) and, while pending, *approve* or *reject* with the reason the customer reads; both go through the
services (audited, emailed)."""
from django import forms
from django.contrib import admin, messages
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_lazy

from core.errors import ServiceError

from ..models_realname import RealNameState, RealNameVerification
from .services import realname_approve, realname_reject

APPROVE, REJECT = "approve", "reject"


class RealNameDecisionForm(forms.ModelForm):
    """The decision; its fields are not the model's, the services write the row."""

    decision = forms.ChoiceField(choices=[("", "—"), (APPROVE, gettext_lazy("Approve")), (REJECT, gettext_lazy("Reject"))], required=False)
    reject_reason = forms.CharField(label=gettext_lazy("Reason (shown to the customer)"), max_length=300, required=False,
                                    widget=forms.Textarea(attrs={"rows": 3, "cols": 60}))

    class Meta:
        model = RealNameVerification
        fields: list = []

    def clean(self):
        data = super().clean()
        if data.get("decision") == REJECT and not (data.get("reject_reason") or "").strip():
            raise forms.ValidationError(gettext("Rejecting needs the reason the customer will read."))
        return data


@admin.register(RealNameVerification)
class RealNameVerificationAdmin(admin.ModelAdmin):
    form = RealNameDecisionForm
    list_display = ["legal_name", "organization", "kind", "state", "created_at", "decided_at"]
    list_filter = ["state", "kind"]
    list_select_related = ["organization"]
    search_fields = ["legal_name", "credit_code", "organization__slug", "organization__name"]
    readonly_fields = ["organization", "submitted_by", "kind", "legal_name", "id_number_masked", "credit_code",
                       "licence_link", "state", "reason", "decided_by", "decided_at", "provider_result", "created_at"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("licence", "id_number_sealed")

    def get_fields(self, request, obj=None):
        decision = ["decision", "reject_reason"]
        return self.readonly_fields + (decision if obj is not None and obj.state == RealNameState.PENDING else [])

    @admin.display(description=gettext_lazy("licence"))
    def licence_link(self, obj):
        if not obj.licence_type:
            return "—"
        url = reverse("admin:tenancy_realnameverification_licence", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url,
                           gettext("business licence (%(type)s)") % {"type": obj.licence_type})

    def get_urls(self):
        licence = self.admin_site.admin_view(self.licence_view)
        return [path("<uuid:pk>/licence/", licence, name="tenancy_realnameverification_licence"),
                *super().get_urls()]

    def licence_view(self, request, pk):
        if not self.has_view_permission(request):
            return HttpResponseRedirect(reverse("admin:index"))
        verification = get_object_or_404(RealNameVerification, pk=pk, licence__isnull=False)
        response = HttpResponse(bytes(verification.licence), content_type=verification.licence_type)
        response["Content-Disposition"] = f'inline; filename="licence-{verification.credit_code}"'
        return response

    def has_add_permission(self, request):
        return False  # customers submit; operators decide

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        try:
            if data.get("decision") == APPROVE:
                realname_approve(verification_id=obj.pk, actor=request.user, request=request)
            elif data.get("decision") == REJECT:
                realname_reject(verification_id=obj.pk, reason=data.get("reject_reason", ""), actor=request.user,
                                request=request)
        except ServiceError as exc:
            self.message_user(request, gettext("Not saved: %(message)s") % {"message": exc.message}, messages.ERROR)
            request.realname_refused = True

    def response_change(self, request, obj):
        if getattr(request, "realname_refused", False):
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)
