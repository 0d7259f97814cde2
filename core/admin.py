"""Admin building blocks shared by every app."""
from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows operators read but never add, edit or delete here (ledgers, logs, histories)."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
