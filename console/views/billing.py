"""Billing in the console: balances, the ledger (paginated), usage per meter and a 30-day spend chart.

All numbers come from billing's selectors; this module only lays them out (money stays int µCNY
until the `fen` filter rounds it for display)."""
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Sum
from django.db.models.functions import TruncDate
from django.shortcuts import render

from billing.choices import TransferCode
from billing.rating import whole_seconds
from billing.selectors import transfer_list, usage_list
from core.dbclock import db_now
from provisioning.selectors import instance_names
from tenancy.permissions import request_can

from ..catalog_names import accelerator_names
from .access import require_capability
from .dashboard import balance_context

LEDGER_PAGE = 25
USAGE_ROWS = 50
CHART_DAYS = 30
CHART_W, CHART_H = 600, 160
SPEND_CODES = (TransferCode.METER, TransferCode.PACKAGE)


def ledger_rows(lines, org) -> list:
    """Each transfer seen from the organization: direction, which of its accounts, what for."""
    labels = dict(TransferCode.choices)
    for t in lines:
        credited = t.credit_account.organization_id == org.pk
        t.direction = "credit" if credited else "debit"
        t.account_kind = (t.credit_account if credited else t.debit_account).kind
        t.label = labels.get(t.code, t.code)
    return lines


def spend_by_day(org, now) -> list[dict]:
    """The last 30 billing-time-zone days of compute spend (meters and packages), one aggregate query."""
    tz = ZoneInfo(settings.BILLING_TIME_ZONE)
    today = now.astimezone(tz).date()
    first = today - timedelta(days=CHART_DAYS - 1)
    start = datetime.combine(first, time.min, tzinfo=tz)
    totals = dict(transfer_list(org=org).order_by()
                  .filter(debit_account__organization=org, code__in=SPEND_CODES, created_at__gte=start)
                  .annotate(day=TruncDate("created_at", tzinfo=tz)).values("day")
                  .annotate(total=Sum("amount")).values_list("day", "total"))
    return [{"day": first + timedelta(days=i), "amount": int(totals.get(first + timedelta(days=i)) or 0)}
            for i in range(CHART_DAYS)]


def spend_chart(days: list[dict]) -> dict:
    """Bar geometry for a server-rendered SVG (no JavaScript, no chart library)."""
    top = max((d["amount"] for d in days), default=0)
    slot = CHART_W / len(days)
    bars = []
    for i, d in enumerate(days):
        h = round(d["amount"] / top * (CHART_H - 20), 1) if top else 0
        bars.append({**d, "x": round(i * slot + 2, 1), "w": round(slot - 4, 1), "h": h,
                     "y": round(CHART_H - 16 - h, 1), "label": i % 5 == 0 or i == len(days) - 1})
    return {"bars": bars, "top": top, "total": sum(d["amount"] for d in days), "width": CHART_W,
            "height": CHART_H, "base": CHART_H - 16}


@login_required
def billing(request):
    """Balance, top-up link, ledger lines, usage, the spend chart, and links to statements and the rest."""
    require_capability(request, "read_billing")
    org = request.org
    now = db_now()
    page = Paginator(transfer_list(org=org), LEDGER_PAGE).get_page(request.GET.get("page"))
    ledger_rows(page.object_list, org)
    start = now - timedelta(days=CHART_DAYS)
    usage = list(usage_list(org=org, start=start, end=now)[:USAGE_ROWS])
    names = accelerator_names(m.accelerator for m in usage) if usage else {}
    lines = list(page.object_list)  # ledger lines and usage rows name instances: one lookup for both
    instances = instance_names(org=org, ids=[row.instance_id for row in lines + usage])
    for t in lines:
        t.instance_name = instances.get(str(t.instance_id), "")
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
