"""Quotes: the same decision as a create (mix, price, availability) without taking anything."""
from dataclasses import dataclass

from inventory.models import Node

from ..card_share import card_share
from ..placement import INSUFFICIENT_CAPACITY
from .capacity import last_busbw, placement_catalog
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


def _item_shares(result) -> dict[int, tuple[int | None, int | None]]:
    """{item index: (millicpus, memory MiB)} its cards bring on the nodes chosen now (one query): a container's
    share of its node in proportion to its cards, a bare-metal item's whole nodes. None where a node's size is
    unknown."""
    sizes = {str(pk): (cards, cpus, mib) for pk, cards, cpus, mib in Node.objects.filter(
        pk__in={a.node_id for a in result.assignments}).values_list("pk", "card_count", "cpu_cores", "memory_mib")}
    out: dict[int, list] = {}
    for a in result.assignments:
        card_count, cpus, mib = sizes[str(a.node_id)]
        share = card_share(cards=len(a.card_indices), card_count=card_count, cpu_cores=cpus, memory_mib=mib)
        total = out.setdefault(a.item_index, [0, 0])
        # One node of unknown size makes the item's total unknown, not smaller.
        total[0] = None if share.millicpus is None or total[0] is None else total[0] + share.millicpus
        total[1] = None if share.memory_mib is None or total[1] is None else total[1] + share.memory_mib
    return {i: (c, m) for i, (c, m) in out.items()}


def _item_busbw(result) -> dict[int, float]:
    """{item index: the lowest last measured readiness busbw (GB/s) of the nodes chosen for it now}; an item none
    of whose nodes was measured yet is left out."""
    measured = last_busbw({a.node_id for a in result.assignments})
    out: dict[int, float] = {}
    for a in result.assignments:
        if (bw := measured.get(str(a.node_id))) is not None:
            out[a.item_index] = min(out.get(a.item_index, bw[0]), bw[0])
    return out


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
    shares = _item_shares(result) if result.ok else {}
    busbw = _item_busbw(result) if result.ok else {}
    rows = [{"accelerator": it.accelerator, "count": it.count,
             "price_per_card_hour": catalog[it.accelerator].price_per_card_hour,
             "millicpus": shares.get(i, (None, None))[0], "memory_mib": shares.get(i, (None, None))[1],
             "busbw_gbps": busbw.get(i)}
            for i, it in enumerate(items)]
    cards = sum(it.count for it in items)
    domestic = sum(it.count for it in items if catalog[it.accelerator].domestic)
    return Quote(items=rows, price_per_hour=sum(r["price_per_card_hour"] * r["count"] for r in rows),
                 available=result.ok, domestic_share=round(domestic / cards, 4) if cards else 0.0,
                 missing=dict(result.missing))
