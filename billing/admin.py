"""Operators' admin for the ledger: read-only accounts, transfers and meters; credit limits; write-off review."""
from django import forms
from django.contrib import admin
from django.utils.translation import gettext, gettext_lazy

from core.admin import CnyField, ReadOnlyAdmin, cny_display, cny_fields
from core.money import format_ucny
from tenancy.audit import audit_record

from .credits import credit_limit_set
from .models import Account, BillingProfile, Meter, Transfer, WriteOff

# The ledger is append-only: operators read it here and correct it with new transfers.


@admin.register(Account)
class AccountAdmin(ReadOnlyAdmin):
    list_display = ["id", "organization", "kind", "balance_cny"]
    fields = readonly_fields = cny_fields(Account, ["balance"])
    list_filter = ["kind"]
    list_select_related = ["organization"]
    search_fields = ["organization__slug", "organization__name"]

    @admin.display(description=gettext_lazy("balance (CNY)"))
    def balance_cny(self, obj):
        return format_ucny(obj.balance)


@admin.register(Transfer)
class TransferAdmin(ReadOnlyAdmin):
    list_display = ["id", "key", "code", "debit_account", "credit_account", "amount_cny", "created_at"]
    fields = readonly_fields = cny_fields(Transfer, ["amount"])
    list_filter = ["code"]
    list_select_related = ["debit_account", "credit_account"]
    search_fields = ["key", "payment_ref", "grant_ref"]

    @admin.display(description=gettext_lazy("amount (CNY)"))
    def amount_cny(self, obj):
        return format_ucny(obj.amount)


@admin.register(Meter)
class MeterAdmin(ReadOnlyAdmin):
    list_display = ["id", "organization", "instance_id", "item_index", "accelerator", "cards", "rate_cny", "opened_at",
                    "closed_at", "posted_through_seconds", "posted_amount_cny", "written_off_amount_cny"]
    list_select_related = ["organization"]
    search_fields = ["instance_id", "organization__slug"]
    fields = readonly_fields = cny_fields(Meter, ["rate", "posted_amount", "written_off_amount"])
    rate_cny = cny_display("rate", gettext_lazy("rate (CNY / card-hour)"))
    posted_amount_cny = cny_display("posted_amount", gettext_lazy("posted (CNY)"))
    written_off_amount_cny = cny_display("written_off_amount", gettext_lazy("written off (CNY)"))


class BillingProfileForm(forms.ModelForm):
    # Typed in CNY, parsed exactly to µCNY (the model's unit); a negative limit is refused before the service.
    credit_limit = CnyField(label=gettext_lazy("Credit limit (CNY)"), allow_negative=True,
                            help_text=gettext_lazy('In CNY, e.g. "10000" or "2500.50" (at most 6 decimals); 0: prepaid.'))

    class Meta:
        model = BillingProfile
        fields = ["credit_limit"]

    def clean_credit_limit(self):
        limit = self.cleaned_data["credit_limit"]
        if limit is None:
            raise forms.ValidationError(gettext("Enter a credit limit (0: prepaid)."))
        if limit < 0:
            raise forms.ValidationError(gettext("The credit limit cannot be negative (0: prepaid)."))
        return limit


@admin.register(BillingProfile)
class BillingProfileAdmin(admin.ModelAdmin):
    """Postpaid credit limits (typed in CNY, kept in µCNY); every change goes through credit_limit_set, audited."""

    form = BillingProfileForm
    list_display = ["organization", "credit_limit_cny", "trial_expires_at", "trial_expired_at",
                    "low_balance_warned_at", "autostop_requested_at"]
    list_select_related = ["organization"]
    search_fields = ["organization__slug", "organization__name"]
    fields = ["organization", "credit_limit", "trial_expires_at", "trial_expired_at", "low_balance_warned_at",
              "autostop_requested_at"]
    readonly_fields = ["organization", "trial_expires_at", "trial_expired_at", "low_balance_warned_at",
                       "autostop_requested_at"]

    @admin.display(description=gettext_lazy("credit limit (CNY)"))
    def credit_limit_cny(self, obj):
        return format_ucny(obj.credit_limit)

    def has_add_permission(self, request):
        return False  # profiles are created with the organization's first ledger use

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        credit_limit_set(org=obj.organization, credit_limit=obj.credit_limit, actor=request.user, request=request)


@admin.register(WriteOff)
class WriteOffAdmin(admin.ModelAdmin):
    """Seconds that could not be charged; operators mark them reviewed."""

    list_display = ["id", "organization", "meter", "seconds", "amount_cny", "reviewed", "created_at"]
    list_filter = ["reviewed"]
    list_select_related = ["organization", "meter"]
    list_editable = ["reviewed"]
    fields = ["meter", "organization", "key", "seconds", "amount_cny", "reviewed", "created_at"]
    readonly_fields = ["meter", "organization", "key", "seconds", "amount_cny", "created_at"]
    amount_cny = cny_display("amount", gettext_lazy("amount (CNY)"))

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if "reviewed" in form.changed_data:
            audit_record(action="billing.write_off_review", org=obj.organization, actor=request.user, target=obj,
                         request=request, details={"reviewed": obj.reviewed, "amount": obj.amount,
                                                   "seconds": obj.seconds, "meter": obj.meter_id})

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


from .fapiao import admin as _fapiao_admin  # noqa: E402,F401  (fapiao)
from .payments import admin as _payments_admin  # noqa: E402,F401  (payments: TopUp, StripeEvent)
from .products import admin as _products_admin  # noqa: E402,F401  (products)
