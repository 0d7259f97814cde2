"""Operators' admin for the ledger: read-only accounts, transfers and meters; credit limits; write-off review."""
from django import forms
from django.contrib import admin

from core.admin import ReadOnlyAdmin
from core.money import format_ucny
from tenancy.audit import audit_record

from .credits import credit_limit_set
from .models import Account, BillingProfile, Meter, Transfer, WriteOff

# The ledger is append-only: operators read it here and correct it with new transfers.


@admin.register(Account)
class AccountAdmin(ReadOnlyAdmin):
    list_display = ["id", "organization", "kind", "balance_cny"]
    list_filter = ["kind"]
    list_select_related = ["organization"]
    search_fields = ["organization__slug", "organization__name"]

    @admin.display(description="balance (CNY)")
    def balance_cny(self, obj):
        return format_ucny(obj.balance)


@admin.register(Transfer)
class TransferAdmin(ReadOnlyAdmin):
    list_display = ["id", "key", "code", "debit_account", "credit_account", "amount_cny", "created_at"]
    list_filter = ["code"]
    list_select_related = ["debit_account", "credit_account"]
    search_fields = ["key", "payment_ref", "grant_ref"]

    @admin.display(description="amount (CNY)")
    def amount_cny(self, obj):
        return format_ucny(obj.amount)


@admin.register(Meter)
class MeterAdmin(ReadOnlyAdmin):
    list_display = ["id", "organization", "instance_id", "item_index", "accelerator", "cards", "rate", "opened_at",
                    "closed_at", "posted_through_seconds", "posted_amount", "written_off_amount"]
    list_select_related = ["organization"]
    search_fields = ["instance_id", "organization__slug"]


class BillingProfileForm(forms.ModelForm):
    class Meta:
        model = BillingProfile
        fields = ["credit_limit"]

    def clean_credit_limit(self):
        limit = self.cleaned_data["credit_limit"]
        if limit < 0:
            raise forms.ValidationError("The credit limit cannot be negative (0: prepaid).")
        return limit


@admin.register(BillingProfile)
class BillingProfileAdmin(admin.ModelAdmin):
    """Postpaid credit limits (µCNY); every change goes through credit_limit_set and is audited."""

    form = BillingProfileForm
    list_display = ["organization", "credit_limit_cny", "trial_expires_at", "trial_expired_at",
                    "low_balance_warned_at", "autostop_requested_at"]
    list_select_related = ["organization"]
    search_fields = ["organization__slug", "organization__name"]
    fields = ["organization", "credit_limit", "trial_expires_at", "trial_expired_at", "low_balance_warned_at",
              "autostop_requested_at"]
    readonly_fields = ["organization", "trial_expires_at", "trial_expired_at", "low_balance_warned_at",
                       "autostop_requested_at"]

    @admin.display(description="credit limit (CNY)")
    def credit_limit_cny(self, obj):
        return format_ucny(obj.credit_limit)

    def get_form(self, request, obj=None, **kwargs):
        kwargs["help_texts"] = {"credit_limit": "In µCNY: 1 CNY = 1,000,000 (10,000 CNY = 10000000000)."}
        return super().get_form(request, obj, **kwargs)

    def has_add_permission(self, request):
        return False  # profiles are created with the organization's first ledger use

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        credit_limit_set(org=obj.organization, credit_limit=obj.credit_limit, actor=request.user, request=request)


@admin.register(WriteOff)
class WriteOffAdmin(admin.ModelAdmin):
    """Seconds that could not be charged; operators mark them reviewed."""

    list_display = ["id", "organization", "meter", "seconds", "amount", "reviewed", "created_at"]
    list_filter = ["reviewed"]
    list_select_related = ["organization", "meter"]
    list_editable = ["reviewed"]
    readonly_fields = ["meter", "organization", "key", "seconds", "amount", "created_at"]

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


from .payments import admin as _payments_admin  # noqa: E402,F401  (payments: TopUp, StripeEvent)
from .products import admin as _products_admin  # noqa: E402,F401  (products)
