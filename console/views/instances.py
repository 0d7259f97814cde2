"""Instances in the console: list, create (with a live htmx quote), detail with live state, and the
lifecycle buttons. Every write goes through provisioning's services; every read through its
tenant-scoped selectors (another organization's instance → 404)."""
import math
import time
import uuid
from decimal import ROUND_CEILING, ROUND_FLOOR

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpResponseNotAllowed
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.http import require_http_methods, require_POST

from billing.funds import available_funds
from core.errors import InsufficientFunds, ServiceError
from core.idempotency import IdempotencyInProgress, IdempotencyKeyReused, credential_of, idempotent_call
from core.money import format_fen, parse_cny
from inventory.selectors import custom_image_list
from provisioning import selectors
from provisioning.card_share import CardShare, cpus_text
from provisioning.choices import InstanceState
from provisioning.models import PackageRenewal
from provisioning.services.billing_port import funds_check
from provisioning.services.health_move import instance_move_healthy
from provisioning.services.instances import instance_create, instance_start, instance_stop, instance_terminate
from provisioning.services.packages import instance_package_renewal_set
from provisioning.services.quotes import quote_compute
from provisioning.services.storage_port import quote_storage
from tenancy.permissions import request_can
from tenancy.realname.policy import realname_limits_text
from tenancy.selectors import ssh_key_list

from ..forms import VENDOR_LABELS, CatalogChoices, InstanceCreateForm, attach_service_error
from ..money_text import rate
from ..service_text import action_refusal, for_people
from ..state_reasons import stop_warning, terminate_warning
from . import instance_context as ic
from .access import or_404, require_capability, require_write
from .confirm import confirm_page
from .images import save_image_context
from .instance_access import access_context
from .instance_slurm import slurm_section
from .storage import instance_mounts, storage_pickers
from .waitlist_context import waitlist_context

PAGE_SIZE = 25
NODE_SIZE = 8  # cards per node in the fleet (bare metal is sold in whole nodes)
SERVICES = {"stop": instance_stop, "start": instance_start, "terminate": instance_terminate,
            "move": instance_move_healthy}  # off a failed card (the notice's button)
# The actions that ask first (both delete what is on the instance's disks): the state they lead to, the button.
ASKS = {"stop": (InstanceState.STOPPING, gettext_lazy("Stop"), stop_warning),
        "terminate": (InstanceState.TERMINATING, gettext_lazy("Terminate"), terminate_warning)}
LEAVE_WAITLIST = gettext_lazy("Your request leaves the queue and is ended; nothing was charged for it.")


def share_text(share: CardShare) -> str:
    """"56 CPUs and 512 GiB memory": what a quote item's cards bring on the nodes chosen now ("" when unknown)."""
    parts = [gettext('%(cpus_text)s CPUs') % {'cpus_text': cpus_text(share.millicpus)} if share.millicpus else "",
             f"{share.memory_gib:.2f}".rstrip("0").rstrip(".") + gettext(" GiB memory") if share.memory_mib else ""]
    return " and ".join(p for p in parts if p)


POLICY_SHORTFALL = {"total": "cards", "domestic": "domestic cards"}  # the keys of a policy's `missing`


# --- list -----------------------------------------------------------------------------------------

@login_required
def instance_list(request):
    """The organization's instances, filterable by state, paginated; refreshes itself while any changes."""
    require_capability(request, "read")
    state = request.GET.get("state", "")
    if state and state not in InstanceState.values:
        state = ""
    page = Paginator(selectors.instance_list(org=request.org, state=state or None), PAGE_SIZE).get_page(
        request.GET.get("page"))
    rows = ic.decorate(page.object_list, can_write=request_can(request, "instances"))
    context = {"page": page, "rows": rows, "state": state, "states": InstanceState.choices,
               "poll": ic.POLL_FAST if any(r.poll == ic.POLL_FAST for r in rows) else "",
               "can_write": request_can(request, "instances")}
    if request.htmx:
        return render(request, "console/partials/instance_table.html", context)
    return render(request, "console/instances/list.html", context)


# --- create ---------------------------------------------------------------------------------------

def _form(request, data=None, catalog=None):
    catalog = catalog or CatalogChoices()
    keys = ssh_key_list(user=request.user)
    private = list(custom_image_list(org=request.org, ready_only=True)) if request.org is not None else []
    return InstanceCreateForm(data, catalog=catalog, ssh_keys=keys, custom_images=private,
                              **storage_pickers(request.org))


def _default_data(form) -> dict:
    """The unbound form's initial values as POST-like data (to quote the default pick)."""
    data = {}
    for name, field in form.fields.items():
        value = form.get_initial_for_field(field, name)
        if value not in (None, ""):
            data[name] = value
    return data


def quote_topology(kind: str, items: list[dict], catalog) -> list[str]:
    """What the chosen mix implies: the fabric inside each node, and across nodes when it spans several."""
    lines, vendors = [], set()
    for row in items:
        acc = catalog.by_slug.get(row["accelerator"])
        if acc is None:
            continue
        vendors.add(acc.vendor)
        inside = ic.INTRA_NODE_FABRIC.get(acc.vendor, "PCIe")
        nodes = 1 if kind == "container" else max(math.ceil(row["count"] / NODE_SIZE), 1)
        text = gettext("%(count)s × %(name)s: %(inside)s inside the node") % {
            "count": row["count"], "name": acc.name, "inside": inside}
        if nodes > 1:
            text = gettext("%(count)s × %(name)s on %(nodes)s nodes: %(inside)s inside each node, "
                           "InfiniBand / RoCE across nodes (one fabric, one zone)") % {
                "count": row["count"], "name": acc.name, "nodes": nodes, "inside": inside}
        lines.append(text)
    if len(vendors) > 1:
        lines.append(gettext("Hybrid: the parts sit on separate nodes in one zone and talk over its InfiniBand / RoCE fabric."))
    return lines


def quote_missing(missing: dict, catalog) -> list[str]:
    """What a sold-out quote lacks, as customers read it: "2 × NVIDIA H100 SXM 80GB", or a policy's "8 cards"."""
    lines = []
    for key, count in sorted(missing.items()):
        acc = catalog.by_slug.get(key)
        lines.append(f"{count} × {acc.name}" if acc else f"{count} {POLICY_SHORTFALL.get(key, key)}")
    return lines


def quota_note(org, cards: int) -> str:
    """Why a create of `cards` would be refused for the organization's card quota ("" when it fits): the quote
    says so before the customer presses Create, rather than "Available now"."""
    if org is None or not cards:
        return ""
    in_use = selectors.org_cards_in_use(org=org)
    if in_use + cards <= org.card_quota:
        return ""
    return (gettext("Over your card quota: this needs %(cards)s card%(s__if_cards____1_else)s, and %(in_use)s of your organization's %(card_quota)s are in use. Stop or terminate an instance, or ask us to raise the quota.") % {'cards': cards, 's__if_cards____1_else': 's' if cards != 1 else '', 'in_use': in_use, 'card_quota': org.card_quota})


def _hours_text(seconds: int) -> str:
    hours, minutes = divmod(max(seconds, 0) // 60, 60)
    if hours >= 48:
        return gettext("about %(days)s days") % {"days": hours // 24}
    if hours:
        return gettext("about %(hours)s h %(minutes)s min") % {"hours": hours, "minutes": minutes}
    return gettext("about %(minutes)s min") % {"minutes": minutes}


def funds_note(org, user, *, price_per_hour: int, billing: str, can_top_up: bool = False) -> dict:
    """What the organization can afford of this quote, by the rule Create applies (provisioning's funds check:
    FUNDS_MIN_MINUTES on demand, the whole package monthly), so the quote says "¥0.00 available — top up first"
    before Create refuses. {} without an organization or a price."""
    if org is None or not price_per_hour:
        return {}
    available = available_funds(org)
    unverified = user is not None and getattr(user, "email_verified_at", 1) is None
    try:
        funds_check(org=org, price_per_hour=price_per_hour, billing=billing)
    except InsufficientFunds as exc:
        required = parse_cny((exc.details or {}).get("required", "0"), allow_negative=True)
        what = gettext("the whole 30-day package") if billing == "monthly" else \
            gettext("%(minutes)s min at %(rate)s/h") % {"minutes": settings.FUNDS_MIN_MINUTES,
                                                        "rate": rate(price_per_hour)}
        # Available rounded down and the need up, so it never reads "¥0.63 available — this needs ¥0.63".
        text = (gettext("%(available)s available — this needs %(required)s to start (%(what)s). ") % {
                "available": format_fen(available, rounding=ROUND_FLOOR),
                "required": format_fen(required, rounding=ROUND_CEILING), "what": what}
                + (gettext("Verify your email first: it unlocks the trial credit.") if unverified else gettext("Top up first.")))
        return {"funds_short": True, "funds_text": text, "funds_unverified": unverified, "can_top_up": can_top_up,
                "funds_available": available, "funds_required": required}
    if billing == "monthly":
        text = gettext("%(available)s available: covers the package.") % {
            "available": format_fen(available, rounding=ROUND_FLOOR)}
    else:
        text = gettext("%(available)s available: %(runway)s at this price.") % {
            "available": format_fen(available, rounding=ROUND_FLOOR),
            "runway": _hours_text(available * 3600 // price_per_hour)}
    return {"funds_short": False, "funds_text": text, "funds_available": available}


def _quote_volumes(form, org) -> dict:
    """The picked volumes' price, as the API's quote adds it (storage_port.quote_storage; none without an org)."""
    picked = form.cleaned_data.get("volumes") or []
    if org is None or not picked:
        return {"volumes": [], "price_per_hour": 0}
    return quote_storage(org=org, volumes=[{"volume": v} for v in picked], datasets=[])


def _quote_context(form, org=None, user=None, can_top_up=False) -> dict:
    """The quote the service computes for a valid form, or why there is none."""
    ctx = {"quote": None, "quote_error": ""}
    if not form.is_valid():
        ctx["quote_error"] = gettext("Complete the card mix to see a price.")
        return ctx
    try:
        quote = quote_compute(spec=form.spec())
        storage = _quote_volumes(form, org)
    except ServiceError as exc:
        texts = [m for msgs in exc.details.values() for m in (msgs if isinstance(msgs, list) else [msgs])]
        ctx["quote_error"] = " ".join(for_people(m, items=form.item_names()) for m in texts or [exc.message])
        return ctx
    catalog = form.catalog
    billing = form.cleaned_data["billing"]
    rows = []
    for row in quote.items:
        acc = catalog.by_slug.get(row["accelerator"])
        rows.append({**row, "name": acc.name if acc else row["accelerator"],
                     "vendor": VENDOR_LABELS.get(acc.vendor, acc.vendor) if acc else "",
                     "available_cards": acc.stock["available_cards"] if acc else 0,
                     "subtotal": row["price_per_card_hour"] * row["count"],
                     "share": share_text(CardShare(row.get("millicpus"), row.get("memory_mib")))})
    ctx.update(quote=quote, rows=rows, monthly=billing == "monthly", missing=quote_missing(quote.missing, catalog),
               volume_rows=storage["volumes"], volumes_per_hour=storage["price_per_hour"],
               total_per_hour=quote.price_per_hour + storage["price_per_hour"],
               package_total=quote.price_per_hour * 720,
               topology=quote_topology(form.cleaned_data["kind"], quote.items, catalog),
               domestic_percent=round(quote.domestic_share * 100),
               policy_mode=form.cleaned_data.get("mode") == "policy",
               quota_note=quota_note(org, sum(row["count"] for row in quote.items)
                                     or form.cleaned_data.get("total_cards") or 0),
               **funds_note(org, user, price_per_hour=quote.price_per_hour, billing=billing, can_top_up=can_top_up))
    return ctx


def _quote_for(request, form) -> dict:
    """The quote context of `form` for this request's organization and user."""
    return _quote_context(form, request.org, request.user, can_top_up=request_can(request, "billing"))


@login_required
def instance_quote(request):
    """htmx: the quote partial for the form's current values (price, stock, chosen mix, topology)."""
    require_capability(request, "read")
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    return render(request, "console/partials/quote.html",
                  {**_quote_for(request, _form(request, request.POST)),
                   "name_taken": name_taken(request.org, request.POST.get("name", ""))})


def name_taken(org, name: str):
    """The organization's live instance already called `name` (None when the name is free): the form warns
    rather than refuses (names are labels, not keys), so two tabs of one plan do not end as two lookalikes."""
    return selectors.instance_named(org=org, name=(name or "").strip()) if org is not None else None


IN_PROGRESS_WAIT_SECONDS = 10  # a second submit of one render waits this long for the first to finish


def _create_once(request, form):
    """instance_create under the form's idempotency key (the API's machinery: same table, scope and locks).
    Returns (instance id, replayed); a second submit of one render while the first runs waits for its answer."""
    data = form.cleaned_data

    def run():
        instance = instance_create(
            org=request.org, actor=request.user, spec=form.spec(), name=data["name"],
            ssh_key_ids=data["ssh_key_ids"], waitlist=data["waitlist"],
            package_renewal=data.get("package_renewal") or "stop", request=request,
            volumes=[{"volume": uuid.UUID(v)} for v in data.get("volumes") or []], datasets=data.get("datasets") or [])
        return 201, {"id": str(instance.pk), "state": instance.state}

    key = data.get("idempotency_key") or ""
    if not key:  # a form from before keys (or a hand-made POST): no replay protection to offer
        _, body = run()
        return body, False
    deadline = time.monotonic() + IN_PROGRESS_WAIT_SECONDS
    while True:
        try:
            result = idempotent_call(org_id=request.org.pk, credential=credential_of(request), method="POST",
                                     path=request.path, key=key, body=form.submission(), run=run)
            return result.body, result.replayed
        except IdempotencyInProgress:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _fresh_key(form) -> None:
    """Give a re-rendered form a new idempotency key (its old one already created something)."""
    form.data = form.data.copy()
    form.data["idempotency_key"] = uuid.uuid4().hex


@login_required
def instance_new(request):
    """The create form. POST creates (or, with `preview`, only re-quotes: the no-JavaScript price update)."""
    require_capability(request, "read")
    can_write = request_can(request, "instances")
    status = 200
    if request.method == "POST":
        require_write(request, "instances")
        form = _form(request, request.POST)
        if "preview" not in request.POST and form.is_valid():
            try:
                body, replayed = _create_once(request, form)
            except IdempotencyKeyReused:
                form.add_error(None, gettext("This form was already submitted with other values, and that created an "
                                     "instance (see All instances). Press Create again to create another one."))
                _fresh_key(form)
                status = 409
            except IdempotencyInProgress:
                form.add_error(None, gettext("This form is still being submitted from another tab; wait a moment and "
                                     "look at All instances before pressing Create again."))
                status = 409
            except ServiceError as exc:
                attach_service_error(form, exc, items=form.item_names())
                status = exc.status
            else:
                if replayed:
                    messages.info(request, gettext("This form was already submitted (another tab, or a second click): "
                                           "here is the instance it created. Nothing was created twice."))
                elif body.get("state") == InstanceState.WAITLISTED:
                    messages.info(request, gettext("Sold out right now: your request is on the waitlist."))
                return redirect("console:instance_detail", instance_id=body["id"])
        quote = _quote_for(request, _form(request, request.POST, catalog=form.catalog))
        name = request.POST.get("name", "")
    else:
        form = _form(request)
        quote = _quote_for(request, _form(request, _default_data(form), catalog=form.catalog))
        name = form["name"].value()
    return render(request, "console/instances/new.html",
                  {**quote, "form": form, "catalog": form.catalog, "can_write": can_write,
                   "name_taken": name_taken(request.org, name), "realname_limited": realname_limits_text(request.org)},
                  status=status)


# --- detail and actions -----------------------------------------------------------------------

def _detail_context(request, instance_id, action_error: str = "") -> dict:
    instance = or_404(selectors.instance_get, org=request.org, instance_id=instance_id)
    (instance,) = ic.decorate([instance], can_write=request_can(request, "instances"))
    events = list(selectors.instance_events(instance=instance))
    reports, earlier_reports = ic.readiness_split(ic.readiness_rows(selectors.instance_reports(instance=instance)),
                                                  events)
    verdicts = ic.readiness_by_node(reports)
    return {
        "instance": instance,
        "renewal_choices": PackageRenewal.choices,
        "events": events,
        "steps": ic.progress(instance, events),
        "reports": reports,
        "earlier_reports": earlier_reports,
        "node_verdicts": verdicts,
        "readiness_failure": ic.readiness_failure_text(verdicts) if instance.state == InstanceState.FAILED else "",
        "compensation": ic.compensation_for(events),
        "health_incidents": selectors.instance_health_incidents(instance=instance),
        "topology": ic.topology(ic.topology_groups(instance)),
        "slurm": slurm_section(instance),
        "action_error": action_error,
        **waitlist_context(instance),
        **instance_mounts(instance.pk),
    }


@login_required
def instance_detail(request, instance_id):
    """One instance; htmx polls its live block (state, steps, readiness, cost, buttons) until it settles."""
    require_capability(request, "read")
    context = _detail_context(request, instance_id)
    if request.htmx:
        return render(request, "console/partials/instance_live.html", context)
    return render(request, "console/instances/detail.html", {**context, **access_context(request, context["instance"]),
                                                             **save_image_context(request, context["instance"])})


@login_required
@require_http_methods(["GET", "POST"])
def instance_action(request, instance_id, action):
    """stop / start / terminate: POST and redirect without JavaScript; htmx swaps the live block in place.
    GET is terminate's or stop's confirmation page (their buttons lead there without JavaScript): both delete
    what is on the instance's disks."""
    require_capability(request, "read")
    service = SERVICES.get(action)
    if service is None:
        raise Http404(gettext("No such action."))
    instance = or_404(selectors.instance_get, org=request.org, instance_id=instance_id)  # 404 before any lock
    if request.method == "GET" and action not in ASKS:
        return HttpResponseNotAllowed(["POST"])
    require_write(request, "instances")
    detail_url = reverse("console:instance_detail", kwargs={"instance_id": instance_id})
    if request.method == "GET":
        to, label, warning = ASKS[action]
        if not instance.can_become(to):  # already there or gone: nothing to ask
            return redirect(detail_url)
        if action == "terminate" and instance.state == InstanceState.WAITLISTED:
            return confirm_page(request, title=gettext('Leave the waitlist with %(name)s?') % {'name': instance.name}, label=gettext("Leave the waitlist"),
                                cancel=detail_url, detail=LEAVE_WAITLIST)
        return confirm_page(request, title=gettext('%(label)s %(name)s?') % {'label': label, 'name': instance.name}, label=label, cancel=detail_url,
                            detail=warning(instance.kind))
    error, leaving = "", instance.state == InstanceState.WAITLISTED
    try:
        service(org=request.org, instance_id=instance_id, actor=request.user, request=request)
    except ServiceError as exc:
        error = action_refusal(exc, action=action, items=len(instance.items or ()))
    if request.htmx:
        return render(request, "console/partials/instance_live.html",
                      _detail_context(request, instance_id, action_error=error))
    if error:
        messages.error(request, error)
    else:
        messages.success(request, gettext("You left the waitlist.") if leaving and action == "terminate" else
                         {"stop": "Stopping…", "start": "Starting…", "terminate": "Terminating…",
                          "move": gettext("Moving to healthy cards…")}[action])
    return redirect(detail_url)


@login_required
@require_POST
def instance_package_renewal(request, instance_id):
    """What happens when the monthly package period ends (form in the live block; works without JavaScript)."""
    require_capability(request, "read")
    or_404(selectors.instance_get, org=request.org, instance_id=instance_id)
    require_write(request, "instances")
    try:
        instance_package_renewal_set(org=request.org, instance_id=instance_id, actor=request.user,
                                     renewal=request.POST.get("package_renewal", ""), request=request)
    except ServiceError as exc:
        messages.error(request, for_people(exc.message))
    else:
        messages.success(request, gettext("Saved what happens when the package period ends."))
    return redirect(reverse("console:instance_detail", kwargs={"instance_id": instance_id}))
