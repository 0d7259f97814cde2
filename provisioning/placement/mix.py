"""Policy mode: the cheapest mix of accelerators that meets a card total and a domestic share."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from .schema import AcceleratorInfo


@dataclass(frozen=True)
class Mix:
    """Chosen cards per accelerator, with its price (µCNY per hour) and number of types."""

    counts: tuple[tuple[str, int], ...]
    price: int
    types: int
    domestic: int

    @property
    def rank(self) -> tuple[int, int]:
        """Policy order: cheaper first, then fewer accelerator types."""
        return (self.price, self.types)


def required_domestic(total: int, min_share: float) -> int:
    """Fewest domestic cards that reach the share (tolerant of float noise like 0.3 * 10)."""
    return max(0, math.ceil(total * min_share - 1e-9))


def choose_mix(
    total: int,
    min_share: float,
    options: Mapping[str, Sequence[int]],
    catalog: Mapping[str, AcceleratorInfo],
) -> Mix | None:
    """Cheapest mix; `options[a]` lists the positive card counts of `a` placeable now.

    Price is linear in cards, so domestic and foreign parts are optimised separately by a
    small knapsack over card counts, then joined. Accelerators are visited in order of more
    options first and a state is replaced only when strictly better, so among equal price and
    type count the mix leans on the larger free pools (less fragmentation).
    """
    need = required_domestic(total, min_share)
    dom = [a for a in options if catalog[a].domestic]
    fore = [a for a in options if not catalog[a].domestic]
    best_dom = _knapsack(dom, options, catalog, total)
    best_fore = _knapsack(fore, options, catalog, total)
    best: Mix | None = None
    for d, (d_price, d_types, d_counts) in best_dom.items():
        if d < need or total - d not in best_fore:
            continue
        f_price, f_types, f_counts = best_fore[total - d]
        mix = Mix(tuple(sorted(d_counts + f_counts)), d_price + f_price, d_types + f_types, d)
        if best is None or mix.rank < best.rank:
            best = mix
    return best


def _knapsack(accs, options, catalog, total) -> dict[int, tuple[int, int, tuple]]:
    """cards -> (price, types, ((acc, count), ...)) of the cheapest way to make exactly `cards`."""
    states: dict[int, tuple[int, int, tuple]] = {0: (0, 0, ())}
    for acc in sorted(accs, key=lambda a: (-max(options[a], default=0), a)):
        price = catalog[acc].price_per_card_hour
        new = dict(states)
        for cards, (cost, types, counts) in states.items():
            for x in options[acc]:
                if cards + x > total:
                    break
                cand = (cost + x * price, types + 1, counts + ((acc, x),))
                old = new.get(cards + x)
                if old is None or cand[:2] < old[:2]:
                    new[cards + x] = cand
        states = new
    return states


def whole_node_sums(available: Mapping[int, int], limit: int) -> list[int]:
    """Positive card totals reachable with whole free nodes (card_count -> how many), up to limit."""
    reach = {0}
    for size, n in available.items():
        reach = {r + size * j for r in reach for j in range(n + 1) if r + size * j <= limit}
    return sorted(r for r in reach if r > 0)


def node_combos(available: Mapping[int, int], target: int) -> Iterator[dict[int, int]]:
    """Ways to make `target` cards from whole free nodes, fewest nodes (largest sizes) first."""
    sizes = sorted((s for s, n in available.items() if n > 0), reverse=True)

    def walk(i: int, left: int) -> Iterator[dict[int, int]]:
        if left == 0:
            yield {}
            return
        if i == len(sizes):
            return
        size = sizes[i]
        for j in range(min(available[size], left // size), -1, -1):
            for rest in walk(i + 1, left - j * size):
                yield ({size: j, **rest} if j else rest)

    yield from walk(0, target)
