"""Operators see instances with their events, placement and readiness reports."""
from django.contrib import admin

from .models import Instance, InstanceEvent, NodeGroup, ReadinessReport, SimulatedFault


class InstanceEventInline(admin.TabularInline):
    model = InstanceEvent
    extra = 0
    can_delete = False
    readonly_fields = ("from_state", "to_state", "reason", "request_id", "actor", "created_at")


class NodeGroupInline(admin.TabularInline):
    model = NodeGroup
    extra = 0
    can_delete = False
    readonly_fields = ("item_index", "accelerator", "node", "card_indices", "state", "prepare_attempts",
                       "check_attempts", "prepared_at", "checked_at", "released_at")
    exclude = ("card_ids", "prepare_output", "prepare_exit_code")


@admin.register(Instance)
class InstanceAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "organization", "kind", "state", "price_per_hour", "created_at", "ready_at")
    list_filter = ("state", "kind", "billing")
    search_fields = ("id", "name", "organization__name")
    list_select_related = ("organization",)
    # State changes go through the services (the transition table), never through a form.
    readonly_fields = [f.name for f in Instance._meta.fields]
    inlines = [NodeGroupInline, InstanceEventInline]


@admin.register(ReadinessReport)
class ReadinessReportAdmin(admin.ModelAdmin):
    list_display = ("instance", "node", "scope", "tool", "attempt", "busbw_largest_gbps", "floor_gbps", "passed")
    list_filter = ("passed", "scope", "tool")
    list_select_related = ("node",)
    readonly_fields = [f.name for f in ReadinessReport._meta.fields]


@admin.register(SimulatedFault)
class SimulatedFaultAdmin(admin.ModelAdmin):
    list_display = ("node", "operation", "faults", "remaining", "created_at")
