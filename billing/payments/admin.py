"""Operators' admin for top-ups (with the refund action) and the applied Stripe events."""
from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse
from django.utils.translation import gettext, gettext_lazy

from billing.models_payments import UCNY_PER_FEN, StripeEvent, TopUp
from core.admin import cny_display
from core.errors import ServiceError
from core.money import MoneyError, format_ucny, parse_cny

from .services import topup_refund


class RefundForm(forms.Form):
    """How much of the captured amount to give back, in CNY with at most 2 decimals."""

    amount = forms.CharField(label=gettext_lazy("Amount (CNY)"), help_text=gettext_lazy('e.g. "30.00"; at most what remains refundable.'))

    def clean_amount(self) -> int:
        try:
            ucny = parse_cny(self.cleaned_data["amount"], max_decimals=2)
        except MoneyError as exc:
            raise forms.ValidationError(str(exc)) from exc
        if ucny <= 0:
            raise forms.ValidationError(gettext("The amount must be positive."))
        return ucny // UCNY_PER_FEN


@admin.register(TopUp)
class TopUpAdmin(admin.ModelAdmin):
    list_display = ["id", "organization", "amount_cny", "state", "refunded_cny", "needs_review", "created_at"]
    list_filter = ["state", "needs_review"]
    search_fields = ["=id", "=stripe_payment_intent_id", "=stripe_charge_id", "organization__name"]
    list_select_related = ["organization"]
    # The PaymentIntent's client secret is the customer's to confirm with, never shown here. Money is shown in CNY:
    # `amount` is µCNY (amount_fen the same in fen), the received and refunded counters are fen.
    fields = ["id", "organization", "created_by", "amount_cny", "state", "stripe_payment_intent_id",
              "stripe_charge_id", "received_cny", "refunded_cny", "refund_requested_cny", "credited_at",
              "failure_message", "needs_review", "review_reason", "created_at", "updated_at"]
    readonly_fields = [name for name in fields if name not in ("needs_review", "review_reason")]
    actions = ["refund"]
    amount_cny = cny_display("amount", gettext_lazy("amount (CNY)"))
    received_cny = cny_display("amount_received_fen", gettext_lazy("received (CNY)"), ucny_per_unit=UCNY_PER_FEN)
    refunded_cny = cny_display("refunded_fen", gettext_lazy("refunded (CNY)"), ucny_per_unit=UCNY_PER_FEN)
    refund_requested_cny = cny_display("refund_requested_fen", gettext_lazy("refund requested (CNY)"), ucny_per_unit=UCNY_PER_FEN)

    def has_add_permission(self, request):
        return False  # top-ups start from the customer's payment, never from the admin

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description=gettext_lazy("Refund part or all of the selected top-up…"))
    def refund(self, request, queryset):
        # Django offers an action without allowed_permissions to anyone who may view the list; a refund moves money.
        if not request.user.has_perm("billing.change_topup"):
            self.message_user(request, gettext("You may not refund top-ups."), messages.ERROR)
            return None
        if queryset.count() != 1:
            self.message_user(request, gettext("Select exactly one top-up to refund."), messages.ERROR)
            return None
        topup = queryset.get()
        form = RefundForm(request.POST if "apply" in request.POST else None)
        if form.is_bound and form.is_valid():
            try:
                topup_refund(topup_id=topup.pk, amount_fen=form.cleaned_data["amount"], actor=request.user,
                             request=request)
            except ServiceError as exc:
                detail = "; ".join(m for msgs in exc.details.values() for m in msgs)
                self.message_user(request, (gettext("Refund refused: %(message)s") % {"message": exc.message}
                                           + f" {detail}").strip(), messages.ERROR)
                return None
            self.message_user(
                request, gettext("Refund of %(amount)s CNY requested at Stripe; cash is debited when Stripe reports "
                                 "charge.refunded.") % {"amount": format_ucny(form.cleaned_data["amount"] * UCNY_PER_FEN)},
                messages.SUCCESS)
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Refund a top-up"),
            "opts": self.model._meta,
            "topup": topup,
            "form": form,
            "refundable": format_ucny(topup.refundable_fen * UCNY_PER_FEN),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/billing/topup/refund.html", context)


@admin.register(StripeEvent)
class StripeEventAdmin(admin.ModelAdmin):
    list_display = ["id", "type", "outcome", "source", "topup", "received_at"]
    list_filter = ["type", "outcome", "source"]
    search_fields = ["=id", "=object_id"]
    list_select_related = ["topup"]
    readonly_fields = [f.name for f in StripeEvent._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # the record that each event was applied once
