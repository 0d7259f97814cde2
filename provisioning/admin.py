"""Operators see instances with their events, placement and readiness reports, read-only: state, rates, placement
and card holdings are the services' (the transition table, the ledger's locked rates), never a form's."""
from django.contrib import admin
from django.utils.html import format_html
from django.utils.translation import gettext_lazy

from core.admin import ReadOnlyAdmin, ReadOnlyInline, cny_display, cny_fields
from core.dbclock import db_now
from core.money import format_ucny

from .models import (
    CardRetest,
    DarkEpisode,
    Instance,
    InstanceEvent,
    NodeGroup,
    ReadinessReport,
    SimulatedFault,
    WarmNode,
    WarmPool,
)
from .services.warm_pool import warm_pool_save, warm_pool_status


class InstanceEventInline(ReadOnlyInline):
    model = InstanceEvent
    fields = ("from_state", "to_state", "reason", "request_id", "actor", "created_at")


class NodeGroupInline(ReadOnlyInline):
    model = NodeGroup
    fields = ("item_index", "accelerator", "node", "card_indices", "state", "ssh_port", "prepare_attempts",
              "check_attempts", "prepare_started_at", "prepared_at", "checked_at", "released_at", "driver_seconds")


class DarkEpisodeInline(ReadOnlyInline):
    """Times a node of the instance went dark: when it was last seen, what was credited, how it ended."""

    model = DarkEpisode
    fields = readonly_fields = ("node", "last_heartbeat_at", "paused_at", "credited_cny", "noticed_at", "deadline",
                                "emailed_at", "ended_at", "outcome")
    credited_cny = cny_display("credited", gettext_lazy("credited (CNY)"))


@admin.register(Instance)
class InstanceAdmin(ReadOnlyAdmin):
    """No add, edit or delete: an instance deleted here would leave its cards allocated and its meter charging, an
    edited state or rate would bypass the transition table and the locked price."""

    list_display = ("id", "name", "organization", "kind", "state", "price_cny", "created_at", "ready_at")
    list_filter = ("state", "kind", "billing")
    search_fields = ("id", "name", "organization__name")
    list_select_related = ("organization",)
    # The view page shows id and times too, and the hourly price in CNY (never the raw µCNY integer).
    fields = readonly_fields = cny_fields(Instance, ["price_per_hour"])
    price_per_hour_cny = cny_display("price_per_hour", gettext_lazy("price per hour (CNY)"))
    inlines = [NodeGroupInline, InstanceEventInline, DarkEpisodeInline]

    @admin.display(description=gettext_lazy("CNY / hour"), ordering="price_per_hour")
    def price_cny(self, obj):
        return format_ucny(obj.price_per_hour)


@admin.register(ReadinessReport)
class ReadinessReportAdmin(ReadOnlyAdmin):
    """The readiness evidence behind each handover and SLA decision: read-only."""

    list_display = ("instance", "node", "scope", "tool", "attempt", "busbw_largest_gbps", "floor_gbps", "passed")
    list_filter = ("passed", "scope", "tool")
    list_select_related = ("instance", "node")
    readonly_fields = [f.name for f in ReadinessReport._meta.fields]


@admin.register(SimulatedFault)
class SimulatedFaultAdmin(admin.ModelAdmin):
    list_display = ("node", "operation", "faults", "remaining", "created_at")
    list_select_related = ("node",)


def _report_evidence(report) -> str:
    """A readiness report as an operator reads it: verdict, bandwidth against the floor, errors, raw output."""
    if report is None:
        return "—"
    bw = (f"busbw {report.busbw_largest_gbps:.1f} GB/s (floor {report.floor_gbps:.1f})"
          if report.busbw_largest_gbps is not None and report.floor_gbps is not None else report.tool)
    lines = [f"report #{report.pk} ({report.scope}, {report.started_at:%Y-%m-%d %H:%M:%S}): "
             f"{'passed' if report.passed else 'failed'}, {bw}", *[f"  {e}" for e in report.errors], "",
             report.raw_output]
    return format_html("<pre style='white-space: pre-wrap'>{}</pre>", "\n".join(lines))


@admin.register(CardRetest)
class CardRetestAdmin(ReadOnlyAdmin):
    """Second passes before quarantine (services/retest.py): both readiness reports are the evidence behind a
    quarantine; a passed one returned its cards to the pool."""

    list_display = ("id", "node", "card_indices", "cause", "state", "instance", "created_at", "finished_at")
    list_filter = ("state", "cause")
    list_select_related = ("node", "instance")
    search_fields = ("node__hostname", "instance__id")
    fields = readonly_fields = ("node", "card_indices", "cause", "state", "instance", "created_at", "started_at",
                                "finished_at", "first_evidence", "second_evidence")

    @admin.display(description=gettext_lazy("first report (failed readiness)"))
    def first_evidence(self, obj):
        return _report_evidence(obj.first_report)

    @admin.display(description=gettext_lazy("second pass"))
    def second_evidence(self, obj):
        return _report_evidence(obj.second_report)


class WarmNodeInline(ReadOnlyInline):
    model = WarmNode
    fields = readonly_fields = ("node", "state", "started_at", "prepared_at", "verified_at", "check_age", "report")

    @admin.display(description=gettext_lazy("age of the check"))
    def check_age(self, obj):
        return _age(obj.verified_at)


def _age(at) -> str:
    if at is None:
        return "—"
    minutes = int((db_now() - at).total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60:02d} min"


@admin.register(WarmPool)
class WarmPoolAdmin(admin.ModelAdmin):
    """Per zone and accelerator, how many whole nodes to keep deployed and verified for bare-metal creates; the
    refill job (services/warm_pool.py) does the rest. Warm nodes older than WARM_POOL_MAX_AGE_HOURS do not count."""

    list_display = ("zone", "accelerator", "size", "image", "warm_now", "oldest_check", "refill_state", "refill_note",
                    "refilled_at")
    list_select_related = ("zone", "accelerator", "image")
    fields = ("zone", "accelerator", "size", "image", "warm_now", "oldest_check", "refill_state", "refill_note",
              "refilled_at")
    readonly_fields = ("warm_now", "oldest_check", "refill_state", "refill_note", "refilled_at")
    inlines = [WarmNodeInline]

    def _row(self, obj):
        return warm_pool_status(obj) if obj.pk else (0, None)

    @admin.display(description=gettext_lazy("warm now"))
    def warm_now(self, obj):
        return f"{self._row(obj)[0]} of {obj.size}"

    @admin.display(description=gettext_lazy("oldest check"))
    def oldest_check(self, obj):
        age = self._row(obj)[1]
        return "—" if age is None else f"{int(age // 3600)} h {int(age % 3600 // 60):02d} min ago"

    def has_delete_permission(self, request, obj=None):
        return False  # its nodes hold cards: a size of 0 gives them back (the refill job does it)

    def save_model(self, request, obj, form, change):
        warm_pool_save(pool=obj, actor=request.user, request=request)
