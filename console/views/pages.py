"""The public landing page: the live price and stock table per card type and zone, the trial, and Sign up
(the dashboard lives in dashboard.py)."""
from django.conf import settings
from django.shortcuts import redirect, render

from inventory.selectors import accelerators_orderable, current_prices, stock_by_zone, zone_list

from .dashboard import dashboard  # noqa: F401  (kept importable from here for old references)


def catalog_rows() -> list[dict]:
    """One row per orderable card type and zone that has its cards: prices in effect now (on demand, monthly and the
    monthly discount in whole percent) and the cards free now out of the zone's total. Four queries."""
    prices = current_prices()
    stock = stock_by_zone()
    zones = {z.slug: z for z in zone_list()}
    rows = []
    for acc in accelerators_orderable():
        if acc.slug not in prices:
            continue
        on_demand, monthly = prices[acc.slug]
        discount = round((1 - monthly / on_demand) * 100) if on_demand else 0
        for zone_slug in sorted(z for z, a in stock if a == acc.slug):
            cards = stock[(zone_slug, acc.slug)]
            if not cards["total_cards"]:
                continue
            rows.append({"accelerator": acc, "zone": zones.get(zone_slug), "on_demand": on_demand, "monthly": monthly,
                         "discount": discount, "free": cards["available_cards"], "total": cards["total_cards"]})
    return rows


def landing(request):
    """Public landing page; signed-in users go straight to their dashboard."""
    if request.user.is_authenticated:
        return redirect("console:dashboard")
    return render(request, "console/landing.html", {
        "rows": catalog_rows(), "trial_credit": settings.TRIAL_CREDIT_UCNY, "trial_days": settings.TRIAL_DAYS,
        "sla_minutes": settings.SLA_SECONDS // 60})
