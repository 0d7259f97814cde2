"""Brute-force oracles for small fleets (<= 6 nodes): what is feasible, and the cheapest policy mix."""

from __future__ import annotations

import itertools
import math

from provisioning.placement import NodeSnapshot, PlacementRequest


def _zones(nodes, request):
    zones = sorted({n.zone for n in nodes if n.state == "available"})
    return [request.zone] if request.zone else zones


def items_feasible(nodes: list[NodeSnapshot], request: PlacementRequest) -> bool:
    """Whether explicit items fit in some zone, by trying every item -> node(s) assignment."""
    for zone in _zones(nodes, request):
        here = [n for n in nodes if n.zone == zone and n.state == "available"]
        if request.kind == "container":
            choices = [
                [i for i, n in enumerate(here) if n.accelerator == it.accelerator] for it in request.items
            ]
            for combo in itertools.product(*choices):
                used = [0] * len(here)
                for item, i in zip(request.items, combo, strict=True):
                    used[i] += item.count
                if all(used[i] <= len(n.free) for i, n in enumerate(here)):
                    return True
        else:
            whole = [n for n in here if len(n.free) == n.card_count]
            for owner in itertools.product(range(len(request.items) + 1), repeat=len(whole)):
                got = [0] * len(request.items)
                ok = True
                for node, o in zip(whole, owner, strict=True):
                    if o < len(request.items):
                        if node.accelerator != request.items[o].accelerator:
                            ok = False
                            break
                        got[o] += node.card_count
                if ok and all(g == it.count for g, it in zip(got, request.items, strict=True)):
                    return True
    return False


def cheapest_mix(nodes, request, catalog) -> int | None:
    """Lowest price per hour of any feasible policy mix (None: none), by enumerating counts."""
    policy = request.policy
    need = math.ceil(policy.total_cards * policy.min_domestic_share - 1e-9)
    best = None
    for zone in _zones(nodes, request):
        here = [n for n in nodes if n.zone == zone and n.state == "available"]
        accs = sorted(
            {n.accelerator for n in here if catalog[n.accelerator].vendor in policy.compatible_vendors}
        )
        reach: dict[str, set[int]] = {}
        for acc in accs:
            mine = [n for n in here if n.accelerator == acc]
            if request.kind == "container":
                # One node per container part, at most 8 cards.
                reach[acc] = set(range(min(max((len(n.free) for n in mine), default=0), 8) + 1))
            else:
                whole = [n.card_count for n in mine if len(n.free) == n.card_count]
                reach[acc] = {sum(c) for r in range(len(whole) + 1) for c in itertools.combinations(whole, r)}
        for counts in itertools.product(*(sorted(reach[a]) for a in accs)):
            if sum(counts) != policy.total_cards:
                continue
            dom = sum(c for a, c in zip(accs, counts, strict=True) if catalog[a].domestic)
            if dom < need:
                continue
            price = sum(c * catalog[a].price_per_card_hour for a, c in zip(accs, counts, strict=True))
            best = price if best is None else min(best, price)
    return best
