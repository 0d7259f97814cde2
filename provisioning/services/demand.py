"""The workload `ours` optimises for, learned from the requests the platform has seen.

Recent instances (their items, or their policy's flexible mix) weigh 0.5 ** (age / half-life); waitlisted
instances are demand now and weigh 1 whatever their age. Read from the database at most once per
PLACEMENT_DEMAND_REFRESH_SECONDS per process, so a decision never pays for it twice, and bounded by
DEMAND_SAMPLE instances so it costs the same at any fleet size.
"""
from __future__ import annotations

import threading
import time

from django.conf import settings
from django.db import connection

from core.dbclock import db_now
from inventory.models import Accelerator

from ..choices import InstanceKind
from ..choices import InstanceState as S
from ..models import Instance
from ..placement import DecayedDemand, Workload

# The most recent requests read per refresh: plenty to estimate a mix of a few sizes and types.
DEMAND_SAMPLE = 5_000
# A bare-metal request of n whole 8-card nodes counts as n requests of 8 cards (what it leaves unusable).
NODE_CARDS = 8

_cache: dict[tuple, tuple[float, Workload | None]] = {}
_cache_lock = threading.Lock()


def _observe(demand: DecayedDemand, row: dict, vendors: dict[str, frozenset], weight: float) -> None:
    policy = row["policy"]
    allowed = None
    if policy:  # flexible: any accelerator of the compatible vendors
        allowed = frozenset().union(*(vendors.get(v, frozenset()) for v in policy.get("compatible_vendors") or ()))
    parts = [(int(i["count"]), allowed if policy else frozenset({i["accelerator"]})) for i in row["items"] or ()]
    if not parts and policy:  # waitlisted before a mix was chosen
        parts = [(int(policy.get("total_cards") or 0), allowed)]
    for count, acc in parts:
        if row["kind"] == InstanceKind.BARE_METAL and count > NODE_CARDS:
            demand.observe(NODE_CARDS, acc, weight * count / NODE_CARDS)
        else:
            demand.observe(count, acc, weight)


def demand_learn() -> Workload | None:
    """Read the recent requests and the waitlist now and return what they say (None: nothing seen)."""
    half_life = settings.PLACEMENT_DEMAND_HALF_LIFE_HOURS * 3600
    vendors: dict[str, set] = {}
    for slug, vendor in Accelerator.objects.values_list("slug", "vendor"):
        vendors.setdefault(vendor, set()).add(slug)
    vendors = {v: frozenset(s) for v, s in vendors.items()}
    fields = ("kind", "items", "policy", "created_at")
    now = db_now()
    demand = DecayedDemand()
    recent = Instance.objects.exclude(state=S.WAITLISTED).order_by("-created_at").values(*fields)[:DEMAND_SAMPLE]
    for row in recent:
        age = max(0.0, (now - row["created_at"]).total_seconds())
        _observe(demand, row, vendors, 0.5 ** (age / half_life))
    for row in Instance.objects.filter(state=S.WAITLISTED).order_by("waitlisted_at").values(*fields)[:DEMAND_SAMPLE]:
        _observe(demand, row, vendors, 1.0)
    return demand.workload()


def demand_workload() -> Workload | None:
    """The learned workload, re-read when older than PLACEMENT_DEMAND_REFRESH_SECONDS (same object until then)."""
    db = connection.settings_dict
    key = (connection.alias, db.get("HOST"), db.get("PORT"), db.get("NAME"))
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and now - hit[0] < settings.PLACEMENT_DEMAND_REFRESH_SECONDS:
        return hit[1]
    workload = demand_learn()
    with _cache_lock:
        _cache[key] = (now, workload)
    return workload


def demand_forget() -> None:
    """Drop the cached workload (tests; after an operator changes the half-life)."""
    with _cache_lock:
        _cache.clear()
