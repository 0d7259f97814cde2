"""Checks that make a request `invalid_request` regardless of free capacity."""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import reduce

from .index import FreeIndex
from .schema import BARE_METAL, CONTAINER, KINDS, MAX_CONTAINER_CARDS, AcceleratorInfo, PlacementRequest

# Bounds the policy-mix dynamic programme (cards × options); far above any single instance.
MAX_POLICY_CARDS = 1024


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate(
    request: PlacementRequest, catalog: Mapping[str, AcceleratorInfo], index: FreeIndex
) -> str | None:
    """Return a message if the request is malformed, else None."""
    if request.kind not in KINDS:
        return f"unknown kind {request.kind!r}; expected one of {', '.join(KINDS)}"
    if bool(request.items) == (request.policy is not None):
        return "give either items or a policy, not both and not neither"
    # A zone absent from the snapshot is not invalid: the snapshot may hold only the asked-for accelerators,
    # so such a zone simply has none free (insufficient capacity). Whether it exists is the caller's check.
    if request.policy is not None:
        return _validate_policy(request, catalog)
    # Every wrong item, one line each (placement_invalid makes them one detail each), not only the first.
    messages = [f"item {i}: {message}" for i, item in enumerate(request.items)
                if (message := _validate_item(request.kind, item, catalog, index))]
    return "\n".join(messages) or None


def _validate_item(kind: str, item, catalog, index: FreeIndex) -> str | None:
    if item.accelerator not in catalog:
        return f"unknown accelerator {item.accelerator!r}"
    if not _is_int(item.count) or item.count < 1:
        return f"count must be an integer >= 1, got {item.count!r}"
    sizes = index.sizes_by_acc.get(item.accelerator)
    if kind == CONTAINER:
        if item.count > MAX_CONTAINER_CARDS:
            return f"a container holds at most {MAX_CONTAINER_CARDS} cards, got {item.count}"
        if sizes and item.count > max(sizes):
            return f"{item.accelerator} nodes have at most {max(sizes)} cards, got {item.count}"
    elif kind == BARE_METAL and sizes:
        step = reduce(math.gcd, sizes)
        if item.count % step:
            return f"bare metal {item.accelerator} takes whole nodes: count must be a multiple of {step}"
    return None


def _validate_policy(request: PlacementRequest, catalog) -> str | None:
    policy = request.policy
    if not _is_int(policy.total_cards) or not 1 <= policy.total_cards <= MAX_POLICY_CARDS:
        return f"policy total_cards must be an integer in 1..{MAX_POLICY_CARDS}"
    share = policy.min_domestic_share
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 <= share <= 1.0:
        return "policy min_domestic_share must be a number in [0, 1]"
    vendors = policy.compatible_vendors
    if isinstance(vendors, str) or not vendors or not all(isinstance(v, str) for v in vendors):
        return "policy compatible_vendors must be a non-empty list of vendor names"
    compatible = sum(1 for info in catalog.values() if info.vendor in vendors)
    if not compatible:
        return f"no accelerator in the catalog is made by {', '.join(vendors)}"
    if request.kind == CONTAINER and policy.total_cards > MAX_CONTAINER_CARDS * compatible:
        # One node per accelerator part: more cards than that is a cluster, which is bare metal.
        return (f"a container holds at most {MAX_CONTAINER_CARDS} cards of each accelerator: at most "
                f"{MAX_CONTAINER_CARDS * compatible} cards for {', '.join(vendors)}; use bare_metal for more")
    return None
