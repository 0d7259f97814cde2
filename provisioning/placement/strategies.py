"""Node-choice strategies: how one slice of cards picks a bucket of equivalent nodes."""

from __future__ import annotations

from .index import FreeIndex, Key
from .workload import FragmentationModel

OURS = "ours"
BEST_FIT = "best_fit"
FIRST_FIT = "first_fit"
SPREAD = "spread"
STRATEGIES = (OURS, BEST_FIT, FIRST_FIT, SPREAD)
# Cards of leftover one unit of pressure is worth: a largest container (tuned on openb gpuspec33).
PRESSURE_WEIGHT = 8


def score(strategy: str, index: FreeIndex, key: Key, count: int, model: FragmentationModel) -> tuple:
    """Lower is better. The first element is additive, so a multi-item plan can sum it across zones."""
    _zone, acc, size, free = key
    left = free - count
    if strategy == OURS:
        # Three terms, in cards: (1) type pressure — a card taken from an accelerator that constrained
        # requests need costs up to a whole node (PRESSURE_WEIGHT), so flexible requests go elsewhere;
        # (2) leftover, as best-fit: under churn it beat pure FGD on the openb trace (see
        # docs/architecture/placement.md); (3) FGD's growth of expected stranded cards (usually < 1
        # card), which breaks the remaining near-ties toward slices the workload can still use.
        value = PRESSURE_WEIGHT * count * model.pressure.get(acc, 0.0) + left + model.delta(free, count)
        return (round(value, 9), left, size)  # rounded so equal choices stay exact ties
    if strategy == BEST_FIT:
        return (left, size)
    if strategy == SPREAD:
        # Kubernetes LeastAllocated: highest share of the node left free after placing.
        return (-left / size, -size)
    if strategy == FIRST_FIT:
        return (min(index.buckets[key]),)
    raise ValueError(f"unknown strategy {strategy!r}")


def pick_node(strategy: str, index: FreeIndex, key: Key) -> int:
    """One node of a bucket: the lowest ordinal for first-fit, otherwise the oldest member (O(1))."""
    bucket = index.buckets[key]
    if strategy == FIRST_FIT:
        return min(bucket)
    return next(iter(bucket))
