"""Checks that make a request `invalid_request` regardless of free capacity."""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import reduce

from .index import FreeIndex
from .schema import BARE_METAL, CONTAINER, KINDS, MAX_CONTAINER_CARDS, AcceleratorInfo, PlacementRequest

# Bounds the policy-mix dynamic programme (cards × options); far above any single instance.
MAX_POLICY_CARDS = 1024


def gettext_noop(message: str) -> str:
    """Marks an engine message for the translation catalog (makemessages looks for this name); the engine imports
    no Django, so the Django side translates (services/specs.placement_message)."""
    return message


class Problem(str):
    """An engine message: its English text, with the msgid and the values it is translated from."""

    def __new__(cls, msgid: str, **values):
        problem = super().__new__(cls, msgid % values)
        problem.msgid, problem.values = msgid, values
        return problem


class Problems(str):
    """validate()'s answer: one line per problem, an item's prefixed "item <index>: " (zero-based, untranslated:
    callers match it), each Problem kept for translation."""

    def __new__(cls, lines: list):  # [(item index or None, Problem)]
        text = "\n".join(p if i is None else f"item {i}: {p}" for i, p in lines)
        problems = super().__new__(cls, text)
        problems.lines = lines
        return problems


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate(
    request: PlacementRequest, catalog: Mapping[str, AcceleratorInfo], index: FreeIndex
) -> Problems | None:
    """Return a message if the request is malformed, else None."""
    if request.kind not in KINDS:
        return Problems([(None, Problem(gettext_noop("unknown kind %(kind)s; expected one of %(kinds)s"),
                                        kind=repr(request.kind), kinds=", ".join(KINDS)))])
    if bool(request.items) == (request.policy is not None):
        return Problems([(None, Problem(gettext_noop("give either items or a policy, not both and not neither")))])
    # A zone absent from the snapshot is not invalid: the snapshot may hold only the asked-for accelerators,
    # so such a zone simply has none free (insufficient capacity). Whether it exists is the caller's check.
    if request.policy is not None:
        problem = _validate_policy(request, catalog)
        return Problems([(None, problem)]) if problem else None
    # Every wrong item, one line each (placement_invalid makes them one detail each), not only the first.
    lines = [(i, problem) for i, item in enumerate(request.items)
             if (problem := _validate_item(request.kind, item, catalog, index))]
    return Problems(lines) if lines else None


def _validate_item(kind: str, item, catalog, index: FreeIndex) -> Problem | None:
    if item.accelerator not in catalog:
        return Problem(gettext_noop("unknown accelerator %(accelerator)s"), accelerator=repr(item.accelerator))
    if not _is_int(item.count) or item.count < 1:
        return Problem(gettext_noop("count must be an integer >= 1, got %(count)s"), count=repr(item.count))
    sizes = index.sizes_by_acc.get(item.accelerator)
    if kind == CONTAINER:
        if item.count > MAX_CONTAINER_CARDS:
            return Problem(gettext_noop("a container holds at most %(most)s cards, got %(count)s"),
                           most=MAX_CONTAINER_CARDS, count=item.count)
        if sizes and item.count > max(sizes):
            return Problem(gettext_noop("%(accelerator)s nodes have at most %(most)s cards, got %(count)s"),
                           accelerator=item.accelerator, most=max(sizes), count=item.count)
    elif kind == BARE_METAL and sizes:
        step = reduce(math.gcd, sizes)
        if item.count % step:
            return Problem(gettext_noop("bare metal %(accelerator)s takes whole nodes: count must be a multiple of "
                                        "%(step)s"), accelerator=item.accelerator, step=step)
    return None


def _validate_policy(request: PlacementRequest, catalog) -> Problem | None:
    policy = request.policy
    if not _is_int(policy.total_cards) or not 1 <= policy.total_cards <= MAX_POLICY_CARDS:
        return Problem(gettext_noop("policy total_cards must be an integer in 1..%(most)s"), most=MAX_POLICY_CARDS)
    share = policy.min_domestic_share
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 <= share <= 1.0:
        return Problem(gettext_noop("policy min_domestic_share must be a number in [0, 1]"))
    vendors = policy.compatible_vendors
    if isinstance(vendors, str) or not vendors or not all(isinstance(v, str) for v in vendors):
        return Problem(gettext_noop("policy compatible_vendors must be a non-empty list of vendor names"))
    compatible = sum(1 for info in catalog.values() if info.vendor in vendors)
    if not compatible:
        return Problem(gettext_noop("no accelerator in the catalog is made by %(vendors)s"), vendors=", ".join(vendors))
    if request.kind == CONTAINER and policy.total_cards > MAX_CONTAINER_CARDS * compatible:
        # One node per accelerator part: more cards than that is a cluster, which is bare metal.
        return Problem(gettext_noop("a container holds at most %(most)s cards of each accelerator: at most "
                                    "%(total)s cards for %(vendors)s; use bare_metal for more"),
                       most=MAX_CONTAINER_CARDS, total=MAX_CONTAINER_CARDS * compatible, vendors=", ".join(vendors))
    return None
