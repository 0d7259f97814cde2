"""Mutable free-card state of a fleet, bucketed so a decision never scans every node."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator

from .schema import AVAILABLE, NodeSnapshot

# State of a node that left the fleet (deleted, retired): its ordinal stays, it is never bucketed.
GONE = "gone"
# Bucket key: nodes in one bucket are interchangeable for every strategy except first-fit.
Key = tuple[str, str, int, int]  # (zone, accelerator, card_count, free count)


class FreeIndex:
    """Nodes by ordinal plus buckets (zone, accelerator, card_count, free count) -> ordinals."""

    def __init__(self, nodes: Iterable[NodeSnapshot]):
        self.ids: list = []
        self.ordinal: dict = {}
        self.zone: list[str] = []
        self.acc: list[str] = []
        self.size: list[int] = []
        self.state: list[str] = []
        self.free: list[set[int]] = []
        self.headroom: list[float] = []
        self.measured = False  # some node has a measured busbw: only then is there a better node to prefer
        # Insertion-ordered dicts used as ordered sets: O(1) add/remove, deterministic order.
        self.buckets: dict[Key, dict[int, None]] = {}
        self.keys_by_acc: dict[str, set[Key]] = {}
        self.sizes_by_acc: dict[str, set[int]] = {}
        self.capacity: dict[str, int] = {}  # cards of available nodes per accelerator
        self.zone_set: set[str] = set()
        self._sizes: Counter = Counter()  # (accelerator, card_count) -> nodes, so a size can leave sizes_by_acc
        self._zones: Counter = Counter()  # zone -> available nodes
        for node in nodes:
            self._add_node(node)

    def _add_node(self, node: NodeSnapshot) -> None:
        """Register one node; unavailable nodes are kept for lookups but never bucketed."""
        if node.id in self.ordinal:
            raise ValueError(f"duplicate node id {node.id!r}")
        self._check(node)
        n = len(self.ids)
        self.ids.append(node.id)
        self.ordinal[node.id] = n
        self.zone.append(node.zone)
        self.acc.append(node.accelerator)
        self.size.append(node.card_count)
        self.state.append(node.state)
        self.free.append(set(node.free))
        self.headroom.append(node.busbw_headroom)
        self.measured = self.measured or node.busbw_headroom > 0
        self._enter(n)

    @staticmethod
    def _check(node: NodeSnapshot) -> None:
        bad = [i for i in node.free if not 0 <= i < node.card_count]
        if bad:
            raise ValueError(f"node {node.id!r}: free card indices {bad} out of range")

    def _enter(self, n: int) -> None:
        """Count node n in the per-type and per-zone figures, and bucket it if it takes cards."""
        self.zone_set.add(self.zone[n])
        acc, size = self.acc[n], self.size[n]
        self._sizes[(acc, size)] += 1
        self.sizes_by_acc.setdefault(acc, set()).add(size)
        if self.state[n] == AVAILABLE:
            self.capacity[acc] = self.capacity.get(acc, 0) + size
            self._zones[self.zone[n]] += 1
            self._bucket_add(n)

    def _leave(self, n: int) -> None:
        """Undo `_enter` for node n (before its fields change)."""
        acc, size = self.acc[n], self.size[n]
        self._sizes[(acc, size)] -= 1
        if not self._sizes[(acc, size)]:
            del self._sizes[(acc, size)]
            self.sizes_by_acc[acc].discard(size)
            if not self.sizes_by_acc[acc]:
                del self.sizes_by_acc[acc]
        if self.state[n] == AVAILABLE:
            self.capacity[acc] -= size
            if not self.capacity[acc]:
                del self.capacity[acc]
            self._zones[self.zone[n]] -= 1
            if not self._zones[self.zone[n]]:
                del self._zones[self.zone[n]]
            self._bucket_remove(n)

    def set_node(self, node_id: Hashable, node: NodeSnapshot | None) -> None:
        """Replace what is known of one node (None: it left the fleet); a node not seen before is added."""
        n = self.ordinal.get(node_id)
        if n is None:
            if node is not None:
                self._add_node(node)
            return
        if node is not None:
            self._check(node)
        if self.state[n] != GONE:
            self._leave(n)
        if node is None:
            self.state[n], self.free[n] = GONE, set()
            return
        self.zone[n], self.acc[n], self.size[n], self.state[n] = node.zone, node.accelerator, node.card_count, node.state
        self.free[n] = set(node.free)
        self.headroom[n] = node.busbw_headroom
        self.measured = self.measured or node.busbw_headroom > 0
        self._enter(n)

    def available_zones(self) -> list[str]:
        """Zones with at least one available node, sorted."""
        return sorted(self._zones)

    def key(self, n: int) -> Key:
        """Current bucket key of node n."""
        return (self.zone[n], self.acc[n], self.size[n], len(self.free[n]))

    def _bucket_add(self, n: int) -> None:
        key = self.key(n)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = {}
            self.keys_by_acc.setdefault(key[1], set()).add(key)
        bucket[n] = None

    def _bucket_remove(self, n: int) -> None:
        key = self.key(n)
        bucket = self.buckets[key]
        del bucket[n]
        if not bucket:
            del self.buckets[key]
            self.keys_by_acc[key[1]].discard(key)

    def best_measured(self, members: Iterable[int], m: int) -> list[int]:
        """The `m` members with the highest busbw headroom, ties in bucket order (O(bucket), as listing it)."""
        if not self.measured:
            return list(members)[:m]
        headroom = self.headroom
        return heapq.nlargest(m, members, key=lambda n: headroom[n])

    def is_available(self, n: int) -> bool:
        """Whether node n may receive new cards."""
        return self.state[n] == AVAILABLE

    def take(self, n: int, count: int) -> tuple[int, ...]:
        """Allocate the `count` lowest free cards of node n (low indices keep NVLink pairs together)."""
        free = self.free[n]
        if count > len(free):
            raise ValueError(f"node {self.ids[n]!r} has {len(free)} free cards, {count} asked")
        cards = tuple(sorted(free)[:count])
        self.take_cards(n, cards)
        return cards

    def take_cards(self, n: int, cards: Iterable[int]) -> None:
        """Allocate exactly these cards of node n; all must be free."""
        cards = tuple(cards)
        free = self.free[n]
        if not free.issuperset(cards) or len(set(cards)) != len(cards):
            raise ValueError(f"node {self.ids[n]!r}: cards {cards} are not all free")
        available = self.is_available(n)
        if available:
            self._bucket_remove(n)
        free.difference_update(cards)
        if available:
            self._bucket_add(n)

    def give(self, n: int, cards: Iterable[int]) -> None:
        """Return cards of node n to the free pool."""
        cards = tuple(cards)
        free = self.free[n]
        if free.intersection(cards) or any(not 0 <= c < self.size[n] for c in cards):
            raise ValueError(f"node {self.ids[n]!r}: cards {cards} are already free or out of range")
        available = self.is_available(n)
        if available:
            self._bucket_remove(n)
        free.update(cards)
        if available:
            self._bucket_add(n)

    def candidate_keys(self, acc: str, zone: str | None, count: int) -> Iterator[Key]:
        """Non-empty buckets of accelerator `acc` (in `zone`, if given) with at least `count` free."""
        for key in self.keys_by_acc.get(acc, ()):
            if key[3] >= count and (zone is None or key[0] == zone):
                yield key

    def zones_of(self, acc: str) -> set[str]:
        """Zones holding available nodes of this accelerator with a free card."""
        return {k[0] for k in self.keys_by_acc.get(acc, ()) if k[3] > 0}

    def free_cards(self, acc: str, zone: str) -> int:
        """Free cards of available nodes of `acc` in `zone`."""
        return sum(k[3] * len(self.buckets[k]) for k in self.keys_by_acc.get(acc, ()) if k[0] == zone)

    def largest_free(self, acc: str, zone: str) -> int:
        """The most free cards on one available node of `acc` in `zone` (the biggest container it can host)."""
        return max((k[3] for k in self.keys_by_acc.get(acc, ()) if k[0] == zone), default=0)

    def whole_free(self, acc: str, zone: str) -> dict[int, int]:
        """Card count -> number of completely free available nodes of `acc` in `zone`."""
        out: dict[int, int] = {}
        for key in self.keys_by_acc.get(acc, ()):
            if key[0] == zone and key[2] == key[3]:
                out[key[2]] = len(self.buckets[key])
        return out
