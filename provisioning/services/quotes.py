"""Quotes: the same decision as a create (mix, price, availability) without taking anything."""
from dataclasses import dataclass

from ..placement import INSUFFICIENT_CAPACITY
from .capacity import placement_catalog
from .claims import placement_decide
from .specs import InstanceSpec, placement_invalid, spec_check


@dataclass(frozen=True)
class Quote:
    """The chosen mix and its price now (µCNY per hour), and whether it can be placed now."""

    items: list[dict]
    price_per_hour: int
    available: bool
    domestic_share: float
    missing: dict


def quote_compute(*, spec: InstanceSpec) -> Quote:
    """Preview a create: 400 for invalid requests; `available: false` when it does not fit now."""
    catalog = placement_catalog(billing=spec.billing)
    spec_check(spec, catalog)
    result = placement_decide(spec.placement_request(), catalog)
    placement_invalid(result)
    if result.ok:
        items = result.items
    elif result.error_code == INSUFFICIENT_CAPACITY and spec.items:
        items = list(spec.items)  # the mix is what was asked for, it just does not fit now
    else:
        items = []
    rows = [{"accelerator": it.accelerator, "count": it.count,
             "price_per_card_hour": catalog[it.accelerator].price_per_card_hour} for it in items]
    cards = sum(it.count for it in items)
    domestic = sum(it.count for it in items if catalog[it.accelerator].domestic)
    return Quote(items=rows, price_per_hour=sum(r["price_per_card_hour"] * r["count"] for r in rows),
                 available=result.ok, domestic_share=round(domestic / cards, 4) if cards else 0.0,
                 missing=dict(result.missing))
