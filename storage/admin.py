"""Operators' admin: storage prices (new rows only: the history is kept), the dataset library, volumes (read)."""
from django import forms
from django.contrib import admin
from django.utils.translation import gettext_lazy

from core.admin import CnyField, ReadOnlyAdmin, ReadOnlyInline, ServiceRefusalMixin, cny_display

from . import services
from .models import Dataset, StoragePrice, Volume, VolumeAttachment


class StoragePriceForm(forms.ModelForm):
    per_gib_hour_cny = CnyField(label=gettext_lazy("CNY / GiB-hour"), help_text=gettext_lazy('In CNY, e.g. "0.000140" (at most 6 decimals).'))

    class Meta:
        model = StoragePrice
        fields = ["zone", "kind", "effective_from"]


@admin.register(StoragePrice)
class StoragePriceAdmin(ServiceRefusalMixin, admin.ModelAdmin):
    """A price change is a new row from its effective_from (volumes lock the rate at create and grow)."""

    form = StoragePriceForm
    list_display = ["zone", "kind", "per_gib_hour_cny", "effective_from"]
    list_filter = ["zone", "kind"]
    per_gib_hour_cny = cny_display("per_gib_hour", gettext_lazy("CNY / GiB-hour"))

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        created = services.storage_price_set(zone=data["zone"], kind=data["kind"],
                                             per_gib_hour=data["per_gib_hour_cny"],
                                             effective_from=data.get("effective_from"), actor=request.user,
                                             request=request)
        obj.pk, obj._state.adding = created.pk, False


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "kind", "size_gib", "active"]
    list_filter = ["kind", "active", "zones"]
    filter_horizontal = ["zones"]
    search_fields = ["slug", "name"]


class AttachmentInline(ReadOnlyInline):
    model = VolumeAttachment
    fields = ["instance_id", "mount_path", "attached_at", "detached_at"]
    readonly_fields = fields


@admin.register(Volume)
class VolumeAdmin(ReadOnlyAdmin):
    list_display = ["name", "organization", "zone", "kind", "size_gib", "usage_gib", "over_quota", "state",
                    "unpaid_since"]
    list_filter = ["state", "kind", "zone", "over_quota"]
    search_fields = ["name", "organization__name", "id"]
    inlines = [AttachmentInline]
