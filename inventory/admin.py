"""The operators' admin for the fleet and the catalog: node actions with a reason, CSV import,
price history, read-only cards with their holders. BMC secrets are never stored here, let alone shown."""
from django import forms
from django.contrib import admin, messages
from django.db.models import OuterRef, Subquery
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.text import format_lazy
from django.utils.translation import gettext, gettext_lazy, pgettext_lazy

from core.admin import CnyField, ReadOnlyAdmin, ServiceRefusalMixin, cny_display, form_action
from core.errors import ServiceError
from core.money import format_ucny
from tenancy.admin import AuditedDeleteMixin

from . import selectors, services
from .forms import NodeCsvImportForm, ReasonForm
from .hooks import holders_describe
from .models import Accelerator, Card, CardAllocation, Image, Node, Price, Zone


class PriceForm(forms.ModelForm):
    """A new price row, typed in CNY (parsed exactly to µCNY: junk, NaN or more than 6 decimals are form errors) and
    checked as price_create checks it (positive amounts, not starting in the past)."""

    # The API's field names (price_errors) → this form's.
    FIELDS = {"price_per_card_hour": "on_demand_per_card_hour_cny",
              "monthly_price_per_card_hour": "monthly_per_card_hour_cny", "effective_from": "effective_from"}

    # Negative amounts pass the parse so that price_errors says what is wrong ("Must be a positive amount").
    on_demand_per_card_hour_cny = CnyField(label=gettext_lazy("CNY / card-hour"), allow_negative=True,
                                           help_text=gettext_lazy('In CNY, e.g. "1.90" (at most 6 decimals).'))
    monthly_per_card_hour_cny = CnyField(label=gettext_lazy("monthly CNY / card-hour"), allow_negative=True, required=False,
                                         help_text=gettext_lazy("In CNY; empty: the on-demand price × 0.65."))

    class Meta:
        model = Price
        fields = ["effective_from"]

    def clean(self):
        data = super().clean()
        if self.instance._state.adding and not self.errors:
            errors = services.price_errors(on_demand_per_card_hour=data.get("on_demand_per_card_hour_cny"),
                                           monthly_per_card_hour=data.get("monthly_per_card_hour_cny"),
                                           effective_from=data.get("effective_from"))
            for name, lines in errors.items():
                self.add_error(self.FIELDS[name], lines)
        return data


class PriceInline(admin.TabularInline):
    """Price history in CNY; existing rows are read-only (rates are locked by instances, changes are new rows, made
    by price_create: validated and audited)."""

    model = Price
    form = PriceForm
    extra = 0
    # Existing rows show these through the displays below (view-only rows list every field read-only).
    fields = ["effective_from", "on_demand_per_card_hour_cny", "monthly_per_card_hour_cny"]
    ordering = ["-effective_from"]
    on_demand_per_card_hour_cny = cny_display("on_demand_per_card_hour", gettext_lazy("CNY / card-hour"))
    monthly_per_card_hour_cny = cny_display("monthly_per_card_hour", gettext_lazy("monthly CNY / card-hour"))

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Accelerator)
class AcceleratorAdmin(ServiceRefusalMixin, AuditedDeleteMixin, admin.ModelAdmin):
    """Created and edited through accelerator_save (audited), slug and vendor fixed once created; deletable
    (audited) only while no price or node names it (both PROTECT): without a price it was never orderable, so no
    instance, meter or package names its slug. Otherwise make it not orderable."""

    delete_action = "accelerator.delete"
    list_display = ["slug", "name", "vendor", "domestic", "memory_gb", "collective", "readiness_floor_gbps",
                    "orderable", "price", "monthly"]
    list_filter = ["vendor", "domestic", "orderable"]
    search_fields = ["slug", "name"]
    inlines = [PriceInline]

    def get_queryset(self, request):
        return selectors.with_current_prices(super().get_queryset(request))

    def get_readonly_fields(self, request, obj=None):
        # Instances' items, meters and statements name the accelerator by slug, placement and images by its vendor.
        return ["slug", "vendor"] if obj else []

    def save_model(self, request, obj, form, change):
        fields = form.changed_data if change else form.cleaned_data
        services.accelerator_save(accelerator=obj, actor=request.user, request=request,
                                  **{k: form.cleaned_data[k] for k in fields if k in form.cleaned_data})

    def save_formset(self, request, form, formset, change):
        if formset.model is not Price:
            return super().save_formset(request, form, formset, change)
        # The admin's change message reads these, as after formset.save().
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        for price_form in formset.extra_forms:
            if price_form.has_changed() and not formset._should_delete_form(price_form):
                data = price_form.cleaned_data
                formset.new_objects.append(services.price_create(
                    accelerator=form.instance, on_demand_per_card_hour=data["on_demand_per_card_hour_cny"],
                    monthly_per_card_hour=data.get("monthly_per_card_hour_cny"),
                    effective_from=data["effective_from"], actor=request.user, request=request))

    @admin.display(description=gettext_lazy("CNY / card-hour"))
    def price(self, obj):
        pair = selectors.price_pair(obj.on_demand_ucny, obj.monthly_set_ucny)
        return format_ucny(pair[0]) if pair else "—"

    @admin.display(description=gettext_lazy("monthly CNY / card-hour"))
    def monthly(self, obj):
        pair = selectors.price_pair(obj.on_demand_ucny, obj.monthly_set_ucny)
        return format_ucny(pair[1]) if pair else "—"


@admin.register(Image)
class ImageAdmin(ServiceRefusalMixin, admin.ModelAdmin):
    list_display = ["slug", "name", "vendors", "active"]
    list_filter = ["active"]
    search_fields = ["slug", "name"]

    def get_readonly_fields(self, request, obj=None):
        # Instances name their images by slug (a restart or a waitlisted create resolves it again): deactivate instead.
        return ["slug"] if obj else []

    def has_delete_permission(self, request, obj=None):
        return False  # deactivate instead (active = off): instances keep the slug

    def save_model(self, request, obj, form, change):
        services.image_save(image=obj, actor=request.user, request=request,
                            **{k: form.cleaned_data[k] for k in form.changed_data if k in form.cleaned_data})


@admin.register(Zone)
class ZoneAdmin(ServiceRefusalMixin, AuditedDeleteMixin, admin.ModelAdmin):
    """Created and edited through zone_save (audited), slug fixed once created; deletable (audited) only while no
    node or instance names it (both PROTECT)."""

    list_display = ["slug", "name", "fabric_kind", "fabric_gbps", "inter_node_floor_gbps", "cluster_network"]
    delete_action = "zone.delete"

    def get_readonly_fields(self, request, obj=None):
        # Nodes, instances (their zone pin), waitlisted shapes and placement name the zone by slug.
        return ["slug"] if obj else []

    def save_model(self, request, obj, form, change):
        fields = form.changed_data if change else form.cleaned_data
        services.zone_save(zone=obj, actor=request.user, request=request,
                           **{k: form.cleaned_data[k] for k in fields if k in form.cleaned_data})


def reason_action(modeladmin, request, queryset, label, items, apply):
    """An admin action that asks for a reason first: the form page, then `apply(queryset, reason)` →
    (success message, [refusal lines]). `items` are the (pk, description) rows the page lists; the operator needs
    the change permission of the rows' model."""
    opts = modeladmin.model._meta
    return form_action(modeladmin, request, label=label, form_class=ReasonForm, items=items,
                       apply=lambda data: apply(queryset, data["reason"]), title=gettext('%(label)s: give a reason') % {'label': label},
                       permission=f"{opts.app_label}.change_{opts.model_name}")


def holder_link(kind, holder_id, described: dict):
    """A card's live holder for operators: "train-1 · Acme Labs" linked to the instance and its organization, a
    maintenance hold as such, "—" for none; the id stays as the tooltip."""
    if not holder_id:
        return "—"
    info = described.get(str(holder_id))
    if info is None:
        return f"{kind} {holder_id}"
    return format_html('<a href="{}" title="{}">{}</a> · <a href="{}">{}</a>', info["url"], holder_id, info["name"],
                       info["org_url"], info["org"])


class CardInline(admin.TabularInline):
    """The node's cards and who holds them, read-only."""

    model = Card
    extra = 0
    fields = ["index", "health", "holder"]
    readonly_fields = fields
    can_delete = False

    def get_queryset(self, request):
        live = CardAllocation.objects.live().filter(card=OuterRef("pk"))
        return super().get_queryset(request).annotate(
            live_holder=Subquery(live.values("holder_id")[:1]), live_kind=Subquery(live.values("holder_kind")[:1]))

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description=gettext_lazy("holder"))
    def holder(self, obj):
        return holder_link(obj.live_kind, obj.live_holder, holders_describe([obj.live_holder]))


def _state_action(verb: str, label: str):
    def run(modeladmin, request, queryset):
        return modeladmin.state_action(request, queryset, verb, label)

    run.__name__ = f"action_{verb}"
    run.short_description = format_lazy(gettext_lazy("{label} selected nodes…"), label=label)
    return run


class NodeForm(forms.ModelForm):
    """A new or changed bmc_credentials_ref must name an existing BMC credential (a typo would only fail when the
    node is powered or booted)."""

    class Meta:
        model = Node
        fields = ["hostname", "zone", "accelerator", "card_count", "cpu_cores", "memory_mib", "driver", "ssh_host",
                  "ssh_port", "fabric_address", "bmc_address", "bmc_credentials_ref"]

    def clean_bmc_credentials_ref(self):
        ref = self.cleaned_data.get("bmc_credentials_ref", "")
        if "bmc_credentials_ref" in self.changed_data and (errors := services.bmc_credentials_ref_errors(ref)):
            raise forms.ValidationError(errors)
        return ref


@admin.register(Node)
class NodeAdmin(ServiceRefusalMixin, admin.ModelAdmin):
    # What operators act on first (state, card counts, why), then where and what the node is: at 1280 px with
    # both admin sidebars the columns after the eighth or so scroll out of view.
    list_display = ["hostname", "state", "cards_free", "cards_allocated", "cards_failed", "state_reason", "zone",
                    "accelerator", "card_count", "driver", "state_changed_at"]
    list_filter = ["state", "zone", "accelerator", "driver"]
    search_fields = ["hostname", "ssh_host", "bmc_address"]
    list_select_related = ["zone", "accelerator"]
    readonly_fields = ["state", "state_reason", "state_changed_at", "created_at"]
    form = NodeForm
    inlines = [CardInline]
    actions = [_state_action("drain", gettext_lazy("Drain")),
               _state_action("undrain", gettext_lazy("Undrain (make available)")),
               _state_action("maintenance", pgettext_lazy("node action", "Maintenance")),
               _state_action("quarantine", gettext_lazy("Quarantine")), _state_action("retire", gettext_lazy("Retire"))]
    change_list_template = "admin/inventory/node/change_list.html"

    def get_queryset(self, request):
        return selectors.node_card_counts(super().get_queryset(request))

    def has_delete_permission(self, request, obj=None):
        # Nodes are retired, never deleted: deleting dropped its cards, agent credential (the saved state) and
        # commands unaudited, and the audit log and reports would name a node that no longer exists.
        return False

    def get_readonly_fields(self, request, obj=None):
        # Cards are created with the node; their number and type are fixed afterwards.
        return self.readonly_fields + (["zone", "accelerator", "card_count", "hostname"] if obj else [])

    @admin.display(description=gettext_lazy("free"), ordering="cards_free")
    def cards_free(self, obj):
        return obj.cards_free

    @admin.display(description=gettext_lazy("allocated"), ordering="cards_allocated")
    def cards_allocated(self, obj):
        return obj.cards_allocated

    @admin.display(description=gettext_lazy("failed"), ordering="cards_failed")
    def cards_failed(self, obj):
        return format_html("<b style='color:#b00'>{}</b>", obj.cards_failed) if obj.cards_failed else 0

    def save_model(self, request, obj, form, change):
        fields = {k: form.cleaned_data.get(k) for k in services.NODE_EDITABLE_FIELDS if k in form.cleaned_data}
        if change:
            services.node_update(node=obj, actor=request.user, request=request,
                                 **{k: v for k, v in fields.items() if k in form.changed_data})
            return
        node = services.node_create(hostname=obj.hostname, zone=obj.zone, accelerator=obj.accelerator,
                                    card_count=obj.card_count, actor=request.user, request=request, **fields)
        obj.pk, obj._state.adding, obj._state.db = node.pk, False, node._state.db

    def get_inline_instances(self, request, obj=None):
        # Cards come from node_create, so the add form has no card inline.
        return super().get_inline_instances(request, obj) if obj else []

    def state_action(self, request, queryset, verb, label):
        """Ask for a reason, then apply the state change to each selected node (each one audited)."""
        def apply(nodes, reason):
            done, refused = 0, []
            for node in nodes.order_by("pk"):
                try:
                    services.node_set_state(node=node, state=verb, reason=reason, actor=request.user, request=request)
                    done += 1
                except ServiceError as exc:
                    refused.append(f"{node.hostname}: {exc.message}")
            return gettext("%(label)s: %(count)s node(s) changed.") % {"label": label, "count": done}, refused

        items = [(n.pk, f"{n.hostname} — {n.get_state_display()}") for n in queryset.order_by("hostname")]
        return reason_action(self, request, queryset, label, items, apply)

    def get_urls(self):
        custom = [path("import-csv/", self.admin_site.admin_view(self.import_csv_view), name="inventory_node_import_csv")]
        return custom + super().get_urls()

    def import_csv_view(self, request):
        """Upload a node CSV; all-or-nothing, errors name the row and field."""
        if not self.has_add_permission(request):
            return HttpResponseRedirect(reverse("admin:inventory_node_changelist"))
        errors = None
        form = NodeCsvImportForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            try:
                nodes = services.nodes_import_csv(file=form.cleaned_data["file"], actor=request.user, request=request)
            except ServiceError as exc:
                errors = {"message": exc.message, "details": exc.details}
            else:
                self.message_user(request, gettext("Imported %(count)s node(s).") % {"count": len(nodes)}, messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:inventory_node_changelist"))
        context = {**self.admin_site.each_context(request), "title": gettext("Import nodes from CSV"), "form": form,
                   "errors": errors, "opts": self.model._meta}
        return TemplateResponse(request, "admin/inventory/node/import_csv.html", context)


def _health_action(health: str, label: str):
    def run(modeladmin, request, queryset):
        def apply(cards, reason):
            changed = services.cards_set_health(card_ids=list(cards.values_list("pk", flat=True)), health=health,
                                                reason=reason, actor=request.user, request=request)
            return gettext("%(label)s: %(count)s card(s) changed.") % {"label": label, "count": changed}, []

        items = [(c.pk, f"{c} — {c.health}") for c in queryset.select_related("node").order_by("node__hostname", "index")]
        return reason_action(modeladmin, request, queryset, label, items, apply)

    run.__name__ = f"action_health_{health}"
    run.short_description = format_lazy(gettext_lazy("{label} selected cards…"), label=label)
    return run


@admin.register(Card)
class CardAdmin(ReadOnlyAdmin):
    """Cards and their current holders; rows are read-only, health changes through actions with a reason
    (a card not ok is never placed; its holder keeps it until released)."""

    actions = [_health_action("failed", gettext_lazy("Mark failed")),
               _health_action("degraded", gettext_lazy("Mark degraded")), _health_action("ok", gettext_lazy("Mark healthy"))]

    list_display = ["__str__", "accelerator", "health", "holder_kind", "holder", "allocated_at"]
    list_filter = ["health", "node__accelerator", "node__zone"]
    search_fields = ["node__hostname"]
    list_select_related = ["node__accelerator"]

    def get_queryset(self, request):
        live = CardAllocation.objects.live().filter(card=OuterRef("pk"))
        return super().get_queryset(request).annotate(
            live_holder=Subquery(live.values("holder_id")[:1]), live_kind=Subquery(live.values("holder_kind")[:1]),
            live_at=Subquery(live.values("allocated_at")[:1]))

    @admin.display(description=gettext_lazy("accelerator"))
    def accelerator(self, obj):
        return obj.node.accelerator.slug

    @admin.display(description=gettext_lazy("holder kind"))
    def holder_kind(self, obj):
        return obj.live_kind or "—"

    def get_changelist_instance(self, request):
        # Name the page's holders in one lookup (provisioning, through inventory's hook), not one per row.
        changelist = super().get_changelist_instance(request)
        rows = list(changelist.result_list)
        described = holders_describe([c.live_holder for c in rows])
        for card in rows:
            card.holder_described = described
        return changelist

    @admin.display(description=gettext_lazy("holder"))
    def holder(self, obj):
        described = getattr(obj, "holder_described", None)
        if described is None:
            described = holders_describe([obj.live_holder])
        return holder_link(obj.live_kind, obj.live_holder, described)

    @admin.display(description=gettext_lazy("allocated at"))
    def allocated_at(self, obj):
        return obj.live_at or "—"



@admin.register(CardAllocation)
class CardAllocationAdmin(ReadOnlyAdmin):
    """Allocation history, read-only (provisioning writes it)."""

    list_display = ["card", "holder_kind", "holder", "allocated_at", "released_at"]
    list_filter = ["holder_kind", ("released_at", admin.EmptyFieldListFilter)]
    search_fields = ["holder_id", "card__node__hostname"]
    list_select_related = ["card__node"]

    def get_changelist_instance(self, request):
        changelist = super().get_changelist_instance(request)  # one lookup for the page's holders
        rows = list(changelist.result_list)
        described = holders_describe([a.holder_id for a in rows])
        for allocation in rows:
            allocation.holder_described = described
        return changelist

    @admin.display(description=gettext_lazy("holder"), ordering="holder_id")
    def holder(self, obj):
        described = getattr(obj, "holder_described", None)
        if described is None:
            described = holders_describe([obj.holder_id])
        return holder_link(obj.holder_kind, obj.holder_id, described)

