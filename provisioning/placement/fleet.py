"""Fleet: free-card state plus the placement decisions made over it."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from .index import GONE, FreeIndex
from .mix import choose_mix, node_combos, required_domestic, whole_node_sums
from .schema import (
    BARE_METAL,
    CONTAINER,
    MAX_CONTAINER_CARDS,
    AcceleratorInfo,
    Assignment,
    Item,
    NodeSnapshot,
    PlacementRequest,
    PlacementResult,
)
from .strategies import FIRST_FIT, OURS, STRATEGIES, pick_node, score
from .validation import Problem, gettext_noop, validate
from .workload import FragmentationModel, Workload

# Backtracking over buckets is exact but exponential in the worst case; past this many tried
# moves a multi-item request is reported as not fitting (never reached by realistic hybrids).
SEARCH_BUDGET = 20_000

Catalog = Mapping[str, AcceleratorInfo] | Iterable[AcceleratorInfo]


def as_catalog(catalog: Catalog) -> dict[str, AcceleratorInfo]:
    """Accept a slug->info mapping or a plain list of AcceleratorInfo."""
    if isinstance(catalog, Mapping):
        return dict(catalog)
    return {info.slug: info for info in catalog}


class Fleet:
    """Placement over a mutable snapshot; `place` never mutates, `allocate`/`release` do."""

    def __init__(self, nodes: Iterable[NodeSnapshot], workload: Workload | None = None):
        self.index = FreeIndex(nodes)
        self.zones = self.index.available_zones()
        self.set_workload(workload)

    def update(self, nodes: Mapping) -> None:
        """Replace these nodes (id -> NodeSnapshot, or None for a node that left) with their state now."""
        capacity = dict(self.index.capacity)
        for node_id, node in nodes.items():
            self.index.set_node(node_id, node)
        self.zones = self.index.available_zones()
        if self.index.capacity != capacity:  # type pressure is relative to capacity
            self.set_workload(self.workload)

    def set_workload(self, workload: Workload | None) -> None:
        """Change the request distribution that the "ours" strategy optimises for."""
        self.workload = workload
        self.model = FragmentationModel(workload, self.index.capacity)

    # -- mutation -----------------------------------------------------------------------------

    def allocate(self, result: PlacementResult) -> None:
        """Take the cards a successful result names; raises ValueError if any is no longer free."""
        if not result.ok:
            raise ValueError("cannot allocate a failed placement")
        done: list[tuple[int, tuple[int, ...]]] = []
        try:
            for a in result.assignments:
                n = self.index.ordinal[a.node_id]
                self.index.take_cards(n, a.card_indices)
                done.append((n, a.card_indices))
        except ValueError:
            for n, cards in reversed(done):  # all or nothing
                self.index.give(n, cards)
            raise

    def release(self, node_id, card_indices: Iterable[int]) -> None:
        """Return cards of one node to the free pool."""
        self.index.give(self.index.ordinal[node_id], card_indices)

    def snapshot(self) -> list[NodeSnapshot]:
        """Current state as snapshots (for tests and for handing to `place`)."""
        ix = self.index
        return [
            NodeSnapshot(ix.ids[n], ix.zone[n], ix.acc[n], ix.size[n], frozenset(ix.free[n]), ix.state[n],
                         ix.headroom[n])
            for n in range(len(ix.ids)) if ix.state[n] != GONE
        ]

    # -- decisions ------------------------------------------------------------------------------

    def place(self, request: PlacementRequest, catalog: Catalog, strategy: str = OURS) -> PlacementResult:
        """Decide where a request goes (or why it cannot); the fleet is left unchanged."""
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
        catalog = as_catalog(catalog)
        message = validate(request, catalog, self.index)
        if message:
            return PlacementResult.invalid(message)
        if request.policy is not None:
            return self._place_policy(request, catalog, strategy)
        zones = [request.zone] if request.zone else self.zones
        best: tuple | None = None
        for zone in zones:
            plan = self._tentative(lambda z=zone: self._search(request.kind, request.items, z, strategy))
            if plan is not None and (best is None or plan[0] < best[0]):
                best = plan
        if best is None:
            return PlacementResult.insufficient(self._missing(request, zones, strategy))
        items = list(request.items)
        return self._result(best[1], items, catalog)

    def place_any(
        self,
        count: int,
        accelerators: Collection[str] | None = None,
        strategy: str = OURS,
        zone: str | None = None,
    ) -> PlacementResult:
        """One container slice of `count` cards on any of `accelerators` (None: any); bench fast path."""
        ix = self.index
        best_key, best_score = None, None
        for acc in accelerators if accelerators is not None else list(ix.keys_by_acc):
            for key in ix.candidate_keys(acc, zone, count):
                # The key breaks ties: set order depends on the string hash seed, results must not.
                s = (score(strategy, ix, key, count, self.model), key)
                if best_score is None or s < best_score:
                    best_key, best_score = key, s
        if best_key is None:
            label = "|".join(sorted(accelerators)) if accelerators is not None else "any"
            return PlacementResult.insufficient({label: count})
        n = pick_node(strategy, ix, best_key)
        cards = tuple(sorted(ix.free[n])[:count])
        assignment = Assignment(0, ix.acc[n], ix.ids[n], ix.zone[n], cards)
        return PlacementResult(ok=True, assignments=[assignment], items=[Item(ix.acc[n], count)])

    # -- internals ------------------------------------------------------------------------------

    def _tentative(self, plan_fn):
        """Run a planner that takes cards, then give every card back; return its plan."""
        plan = plan_fn()
        if plan is not None:
            for _item, n, cards in reversed(plan[1]):
                self.index.give(n, cards)
        return plan

    def _search(self, kind: str, items, zone: str, strategy: str):
        """Depth-first over buckets (largest items first); returns (score, [(item, node, cards)]) or None.

        Nodes in one bucket are interchangeable, so trying one node per bucket is exact; the first
        branch tried is the strategy's greedy choice, so usually no backtracking happens.
        """
        ix = self.index
        order = sorted(range(len(items)), key=lambda i: -items[i].count)
        chosen: list[tuple[int, int, tuple[int, ...]]] = []
        budget = [SEARCH_BUDGET]
        # Multi-node: of equivalent nodes, the ones measured far above the floor (first-fit keeps its order).
        measured = strategy != FIRST_FIT and ix.measured and len(items) >= 2

        def moves(item):
            if kind == CONTAINER:
                keys = list(ix.candidate_keys(item.accelerator, zone, item.count))
                scored = sorted((score(strategy, ix, k, item.count, self.model), k) for k in keys)
                for s, key in scored:
                    n = ix.best_measured(ix.buckets[key], 1)[0] if measured else pick_node(strategy, ix, key)
                    yield s[0], [(n, item.count)]
            else:
                whole = ix.whole_free(item.accelerator, zone)
                for combo in node_combos(whole, item.count):
                    picks = []
                    for size, m in combo.items():
                        bucket = ix.buckets[(zone, item.accelerator, size, size)]
                        members = sorted(bucket)[:m] if strategy == FIRST_FIT else ix.best_measured(bucket, m)
                        picks.extend((n, size) for n in members)
                    yield 0, picks

        def walk(pos: int, total: float):
            if pos == len(order):
                return total
            i = order[pos]
            for s, picks in moves(items[i]):
                budget[0] -= 1
                if budget[0] < 0:
                    return None
                taken = [(i, n, ix.take(n, c)) for n, c in picks]
                chosen.extend(taken)
                found = walk(pos + 1, total + s)
                if found is not None:
                    return found
                for _i, n, cards in reversed(taken):
                    ix.give(n, cards)
                del chosen[len(chosen) - len(taken) :]
            return None

        total = walk(0, 0)
        return None if total is None else (total, chosen)

    def _fits(self, kind: str, item: Item, zone: str) -> int:
        """The most cards of `item` that would fit in `zone` now: the largest free slice of one node
        (container), or the largest total of whole free nodes up to its count (bare metal)."""
        if kind == CONTAINER:
            return min(item.count, self.index.largest_free(item.accelerator, zone))
        sums = whole_node_sums(self.index.whole_free(item.accelerator, zone), item.count)
        return sums[-1] if sums else 0

    def _missing(self, request: PlacementRequest, zones, strategy: str) -> dict[str, int]:
        """Cards per accelerator a greedy pass could not place, in the zone where the least is missing: of an
        item that does not fit, the part beyond what would fit ("8 × H800" with 7 free on one node: 1 short)."""
        best: dict[str, int] | None = None
        for zone in zones:
            missing: dict[str, int] = {}
            placed: list[tuple[int, int, tuple[int, ...]]] = []
            for item in sorted(request.items, key=lambda it: -it.count):
                plan = self._search(request.kind, (item,), zone, strategy)
                if plan is None:
                    short = item.count - self._fits(request.kind, item, zone)
                    # ≤ 0 only when the search gave up (its budget) though the item alone would fit: all of it
                    missing[item.accelerator] = missing.get(item.accelerator, 0) + (short if short > 0 else item.count)
                else:
                    placed.extend(plan[1])
            for _i, n, cards in reversed(placed):
                self.index.give(n, cards)
            if best is None or sum(missing.values()) < sum(best.values()):
                best = missing
        if best is None:  # no available node anywhere
            best = {}
            for item in request.items:
                best[item.accelerator] = best.get(item.accelerator, 0) + item.count
        return best

    def _result(self, chosen, items: list[Item], catalog, share: float | None = None) -> PlacementResult:
        """Build a successful result from (item index, node, cards) triples."""
        ix = self.index
        assignments = [
            Assignment(i, items[i].accelerator, ix.ids[n], ix.zone[n], tuple(cards))
            for i, n, cards in sorted(chosen, key=lambda t: (t[0], t[1]))
        ]
        price = sum(catalog[it.accelerator].price_per_card_hour * it.count for it in items)
        cards = sum(it.count for it in items)
        domestic = sum(it.count for it in items if catalog[it.accelerator].domestic)
        return PlacementResult(
            ok=True,
            assignments=assignments,
            items=list(items),
            price_per_hour=price,
            domestic_share=domestic / cards if cards else 0.0,
        )

    def _place_policy(self, request: PlacementRequest, catalog, strategy: str) -> PlacementResult:
        """Cheapest compatible mix in one zone, then place each accelerator's cards."""
        policy = request.policy
        total = policy.total_cards
        ix = self.index
        accs = sorted(a for a, info in catalog.items() if info.vendor in policy.compatible_vendors)
        zones = [request.zone] if request.zone else self.zones
        best = None
        best_all = best_dom = 0
        for zone in zones:
            options: dict[str, list[int]] = {}
            for acc in accs:
                if request.kind == CONTAINER:
                    # A container part is one node's cards (SPEC §3: 1–8 on one node): up to the largest free slice.
                    options[acc] = list(range(1, min(ix.largest_free(acc, zone), MAX_CONTAINER_CARDS, total) + 1))
                else:
                    options[acc] = whole_node_sums(ix.whole_free(acc, zone), total)
            free_all = sum(max(o, default=0) for o in options.values())
            free_dom = sum(max(o, default=0) for a, o in options.items() if catalog[a].domestic)
            best_all, best_dom = max(best_all, free_all), max(best_dom, free_dom)
            mix = choose_mix(total, policy.min_domestic_share, options, catalog)
            if mix is not None and (best is None or mix.rank < best[0].rank):
                best = (mix, zone)
        if best is None:
            need = required_domestic(total, policy.min_domestic_share)
            missing = {"total": max(0, total - best_all), "domestic": max(0, need - best_dom)}
            missing = {k: v for k, v in missing.items() if v} or {"total": total}
            return PlacementResult.insufficient(missing, Problem(gettext_noop("no compatible mix fits the free capacity now")))
        mix, zone = best
        items = [Item(acc, count) for acc, count in mix.counts]
        chosen = self._tentative(lambda: self._materialise(request.kind, items, zone, strategy))
        if chosen is None:  # cannot happen: the options above are exactly what fits
            return PlacementResult.insufficient({"total": total}, Problem(gettext_noop("chosen mix no longer fits")))
        return self._result(chosen[1], items, catalog)

    def _materialise(self, kind: str, items: list[Item], zone: str, strategy: str):
        """Place a policy mix: each container part on one node, bare metal as whole nodes."""
        ix = self.index
        chosen: list[tuple[int, int, tuple[int, ...]]] = []
        for i, item in enumerate(items):
            if kind == BARE_METAL:
                plan = self._search(kind, (item,), zone, strategy)
                if plan is None:
                    return None
                chosen.extend((i, n, cards) for _j, n, cards in plan[1])
                continue
            size = item.count
            keys = list(ix.candidate_keys(item.accelerator, zone, size))
            if not keys:
                return None
            key = min(keys, key=lambda k: (score(strategy, ix, k, size, self.model), k))
            n = pick_node(strategy, ix, key)
            chosen.append((i, n, ix.take(n, size)))
        return (0, chosen)


def place(
    nodes: Iterable[NodeSnapshot],
    request: PlacementRequest,
    catalog: Catalog,
    strategy: str = OURS,
    workload: Workload | None = None,
) -> PlacementResult:
    """One-shot placement over a snapshot (builds a Fleet; nothing is mutated)."""
    return Fleet(nodes, workload).place(request, catalog, strategy)
