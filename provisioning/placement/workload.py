"""Expected request mix that the fragmentation-aware strategy ("ours") optimises for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, eq=False)
class Workload:
    """Distribution of future requests: card counts, and which requests are tied to accelerators.

    `sizes` maps a card count to its probability (normalised here). `constrained` maps a set of
    accelerator slugs to the share of requests that may only use those accelerators; the rest of
    the requests accept any accelerator.
    """

    sizes: Mapping[int, float]
    constrained: Mapping[frozenset[str], float] = field(default_factory=dict)

    def size_probabilities(self) -> dict[int, float]:
        """Card count -> probability, summing to 1."""
        total = sum(p for k, p in self.sizes.items() if k > 0 and p > 0)
        if total <= 0:
            return dict(DEFAULT_SIZES)
        return {k: p / total for k, p in self.sizes.items() if k > 0 and p > 0}


# Without evidence, assume every slice size is common and whole 8-card nodes matter most
# (bare metal and large slices are the requests that fragmentation refuses first).
DEFAULT_SIZES = {1: 0.4, 2: 0.2, 4: 0.2, 8: 0.2}
DEFAULT_WORKLOAD = Workload(sizes=DEFAULT_SIZES)


class FragmentationModel:
    """Precomputed FGD terms for one workload: Δ stranded cards per (free, take) and type pressure."""

    def __init__(self, workload: Workload | None, capacity: Mapping[str, int]):
        workload = workload or DEFAULT_WORKLOAD
        self.sizes = workload.size_probabilities()
        self._delta: dict[tuple[int, int], float] = {}
        self.pressure = _pressure(workload, capacity)

    def stranded(self, free: int) -> float:
        """Expected free cards of a node that a random request cannot use (FGD's fragmentation).

        With whole cards a request of k cards can use a node with f free cards iff k <= f; when it
        cannot, all f free cards are stranded for that request.
        """
        return sum(p * free for k, p in self.sizes.items() if k > free)

    def delta(self, free: int, take: int) -> float:
        """Change in stranded cards when `take` of a node's `free` cards are allocated."""
        key = (free, take)
        value = self._delta.get(key)
        if value is None:
            value = self.stranded(free - take) - self.stranded(free)
            self._delta[key] = value
        return value


def _pressure(workload: Workload, capacity: Mapping[str, int]) -> dict[str, float]:
    """Constrained demand on each accelerator relative to its share of the fleet's cards.

    A value above 1 means requests that can run nowhere else would fill this accelerator alone,
    so unconstrained requests should go elsewhere; 0 means nobody needs it specifically.
    """
    total_cap = sum(capacity.values())
    if not total_cap or not workload.constrained:
        return {}
    demand: dict[str, float] = {}
    for accelerators, share in workload.constrained.items():
        usable = [a for a in accelerators if capacity.get(a)]
        if not usable or share <= 0:
            continue
        # Split a flexible request's demand over the accelerators it accepts, by their capacity.
        cap = sum(capacity[a] for a in usable)
        for a in usable:
            demand[a] = demand.get(a, 0.0) + share * capacity[a] / cap
    return {a: d / (capacity[a] / total_cap) for a, d in demand.items()}


class DecayedDemand:
    """Requests seen so far, each weighted by how recent it is: the workload `ours` learns.

    `observe` adds one request (card count, accelerators it may use or None for any) with a weight;
    `decay` ages everything seen so far by a factor. Production weighs each recent request by
    0.5 ** (age / half-life); the churn benchmark decays once per arrival. Only a handful of distinct
    sizes and accelerator sets exist, so both are cheap.
    """

    def __init__(self):
        self.sizes: dict[int, float] = {}
        self.constrained: dict[frozenset[str], float] = {}
        self.total = 0.0

    def observe(self, count: int, allowed: frozenset[str] | None, weight: float = 1.0) -> None:
        """One request of `count` cards that may run on `allowed` (None: any accelerator)."""
        if weight <= 0 or count < 1:
            return
        self.sizes[count] = self.sizes.get(count, 0.0) + weight
        if allowed is not None:
            key = frozenset(allowed)
            self.constrained[key] = self.constrained.get(key, 0.0) + weight
        self.total += weight

    def decay(self, factor: float) -> None:
        """Multiply every weight seen so far by `factor` (0 < factor <= 1)."""
        for table in (self.sizes, self.constrained):
            for key in table:
                table[key] *= factor
        self.total *= factor

    def workload(self) -> Workload | None:
        """The learned distribution, or None (the default) when nothing has been seen."""
        if self.total <= 1e-12:
            return None
        return Workload(
            sizes={k: v / self.total for k, v in self.sizes.items()},
            constrained={a: v / self.total for a, v in self.constrained.items()},
        )
