"""The customer's home: balance by kind, burn rate, exhaustion estimate and running instances."""
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from billing.selectors import balance_summary, trial_expiry
from core.dbclock import db_now
from provisioning import selectors as instance_selectors
from provisioning.choices import InstanceState
from tenancy.permissions import request_can

from . import instance_context as ic

ACTIVE_STATES = ",".join([InstanceState.RUNNING, InstanceState.PENDING, InstanceState.PROVISIONING,
                          InstanceState.CHECKING, InstanceState.STARTING, InstanceState.STOPPING,
                          InstanceState.WAITLISTED])
DASHBOARD_ROWS = 20


def balance_context(org) -> dict:
    """The balance numbers and whether the low-balance banner shows (under one hour of burn left)."""
    summary = balance_summary(org=org)
    now = db_now()
    exhausts_at = summary["exhausts_at"]
    seconds_left = int((exhausts_at - now).total_seconds()) if exhausts_at else None
    warn_window = timedelta(seconds=settings.LOW_BALANCE_WARNING_SECONDS).total_seconds()
    low = summary["low_balance_warning"] or (seconds_left is not None and seconds_left < warn_window)
    kinds = [(kind, summary[kind]) for kind in ("trial", "compensation", "grant", "cash")]
    trial_until = trial_expiry(org=org) if summary["trial"] else None  # spent or expired: no date to show
    return {"balance": summary, "kinds": kinds, "seconds_left": seconds_left, "low_balance": low,
            "trial_expires_at": trial_until}


@login_required
def dashboard(request):
    """Balances (for roles that read billing) and the active instances (for roles that read instances)."""
    context = {"has_org": request.org is not None}
    if request.org is not None and request_can(request, "read_billing"):
        context.update(balance_context(request.org), show_billing=True, can_top_up=request_can(request, "billing"))
    if request.org is not None and request_can(request, "read"):
        active = instance_selectors.instance_list(org=request.org, state=ACTIVE_STATES)[:DASHBOARD_ROWS]
        context["instances"] = ic.decorate(active, can_write=request_can(request, "instances"))
        context["show_instances"] = True
        context["can_write"] = request_can(request, "instances")
    return render(request, "console/dashboard.html", context)
