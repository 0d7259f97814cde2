"""Billing in the console: balances, the ledger (paginated), usage per meter and a 30-day spend chart.

All numbers come from billing's selectors; this module only lays them out (money stays int µCNY
until the `fen` filter rounds it for display)."""
from datetime import date, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import render
from django.utils.translation import gettext

from billing import selectors as billing_selectors
from billing.choices import TransferCode
from billing.rating import whole_seconds
from billing.selectors import account_kinds, transfer_day_lines, transfer_groups, usage_list
from core.dbclock import db_now
from provisioning.selectors import event_instances, instance_get, instance_names
from tenancy.permissions import request_can

from ..catalog_names import accelerator_names
from .access import or_404, require_capability
from .dashboard import balance_context

LEDGER_PAGE = 25
USAGE_ROWS = 50
CHART_DAYS = 30
CHART_W, CHART_H = 600, 160


def ledger_rows(lines, org) -> list:
    """Each transfer seen from the organization: direction, which of its accounts, what for."""
    labels = dict(TransferCode.choices)
    for t in lines:
        credited = t.credit_account.organization_id == org.pk
        t.direction = "credit" if credited else "debit"
        t.account_kind = (t.credit_account if credited else t.debit_account).kind
        t.label = labels.get(t.code, t.code)
    return lines


def ledger_group_rows(rows, org) -> list:
    """transfer_groups rows seen from the organization (direction, its account's kind, what for), each naming its
    instance: metered usage and packages by their instance id, an SLA credit by the request event it compensates."""
    kinds = account_kinds(org=org)
    labels = dict(TransferCode.choices)
    rows = list(rows)
    breaches = event_instances(org=org, event_ids=[r["grant_ref"] for r in rows if r["code"] == TransferCode.SLA])
    for r in rows:
        credited = r["credit_account_id"] in kinds
        r["direction"] = "credit" if credited else "debit"
        r["account_kind"] = kinds.get(r["credit_account_id"] if credited else r["debit_account_id"], "")
        r["label"] = labels.get(r["code"], r["code"])
        r["meter_id"] = r["min_meter"] if r["min_meter"] == r["max_meter"] else None
        r["grouped"] = r["code"] == TransferCode.METER and r["lines"] > 1
        if r["code"] == TransferCode.SLA and r["grant_ref"] in breaches:
            r["instance_id"] = breaches[r["grant_ref"]][0]
            r["compensates"] = True
    names = instance_names(org=org, ids=[r["instance_id"] for r in rows])
    for r in rows:
        r["instance_name"] = names.get(str(r["instance_id"]), "") if r["instance_id"] else ""
    return rows


def spend_by_day(org, now) -> list[dict]:
    """The last 30 billing-time-zone days of compute spend (meters and packages), one aggregate query."""
    return billing_selectors.spend_by_day(org=org, now=now, days=CHART_DAYS, tz=ZoneInfo(settings.BILLING_TIME_ZONE))


CHART_TOP = 18  # px above the tallest bar: the "max … /day" label sits there, never on a bar
CHART_AXIS = 16  # px below the bars for the day labels


def spend_chart(days: list[dict]) -> dict:
    """Bar geometry for a server-rendered SVG (no JavaScript, no chart library). Day labels are anchored so that
    none runs past an edge: the first starts at its bar, the last ends at its bar, the others centre on theirs."""
    top = max((d["amount"] for d in days), default=0)
    slot = CHART_W / len(days)
    base = CHART_H - CHART_AXIS
    bars = []
    for i, d in enumerate(days):
        h = round(d["amount"] / top * (base - CHART_TOP), 1) if top else 0
        x, w = round(i * slot + 2, 1), round(slot - 4, 1)
        anchor, label_x = ("start", x) if i == 0 else ("end", x + w) if i == len(days) - 1 else ("middle", x + w / 2)
        bars.append({**d, "x": x, "w": w, "h": h, "y": round(base - h, 1),
                     "label": i % 5 == 0 or i == len(days) - 1, "anchor": anchor, "label_x": round(label_x, 1)})
    return {"bars": bars, "top": top, "total": sum(d["amount"] for d in days), "width": CHART_W,
            "height": CHART_H, "base": base, "top_y": CHART_TOP}


@login_required
def billing(request):
    """Balance, top-up link, ledger lines, usage, the spend chart, and links to statements and the rest."""
    require_capability(request, "read_billing")
    org = request.org
    now = db_now()
    tz = ZoneInfo(settings.BILLING_TIME_ZONE)
    page = Paginator(transfer_groups(org=org, tz=tz), LEDGER_PAGE).get_page(request.GET.get("page"))
    page.object_list = ledger_group_rows(page.object_list, org)
    start = now - timedelta(days=CHART_DAYS)
    usage = list(usage_list(org=org, start=start, end=now)[:USAGE_ROWS])
    names = accelerator_names(m.accelerator for m in usage) if usage else {}
    instances = instance_names(org=org, ids=[row.instance_id for row in usage])
    for m in usage:
        m.seconds = whole_seconds(max(m.opened_at, start), min(m.closed_at or now, now))
        m.accelerator_name = names.get(m.accelerator, m.accelerator)
        m.instance_name = instances.get(str(m.instance_id), "")
    context = {**balance_context(org), "page": page, "usage": usage, "chart": spend_chart(spend_by_day(org, now)),
               "can_top_up": request_can(request, "billing"), "time_zone": settings.BILLING_TIME_ZONE,
               "link_instances": request_can(request, "read")}
    if request.htmx and request.GET.get("page"):
        return render(request, "console/partials/ledger_table.html", context)
    return render(request, "console/billing/ledger.html", context)


@login_required
def ledger_day(request, instance_id, day):
    """The drill-down of a grouped ledger row: one instance's metered-usage lines of one day (another tenant's
    instance → 404, like its page)."""
    require_capability(request, "read_billing")
    org = request.org
    instance = or_404(instance_get, org=org, instance_id=instance_id)
    try:
        on = date.fromisoformat(day)
    except ValueError:
        raise Http404(gettext("No such day.")) from None
    tz = ZoneInfo(settings.BILLING_TIME_ZONE)
    lines = list(transfer_day_lines(org=org, instance_id=instance.pk, day=on, tz=tz))
    for t in lines:  # a posting's charge, all its sources together (what each source paid is in the ledger)
        t.direction, t.account_kind = "debit", gettext("Credits and cash")
    context = {"instance": instance, "day": on, "lines": lines, "total": sum(t.amount for t in lines),
               "time_zone": settings.BILLING_TIME_ZONE, "link_instances": request_can(request, "read")}
    return render(request, "console/billing/ledger_day.html", context)
