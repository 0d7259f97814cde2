"""Placement engine: pure Python over a snapshot of free cards (imports nothing from Django)."""

from .fleet import Fleet, as_catalog, place
from .mix import Mix, choose_mix
from .schema import (
    BARE_METAL,
    CONTAINER,
    INSUFFICIENT_CAPACITY,
    INVALID_REQUEST,
    AcceleratorInfo,
    Assignment,
    Item,
    NodeSnapshot,
    PlacementRequest,
    PlacementResult,
    Policy,
)
from .strategies import STRATEGIES
from .workload import DEFAULT_WORKLOAD, DecayedDemand, Workload

__all__ = [
    "BARE_METAL",
    "CONTAINER",
    "DEFAULT_WORKLOAD",
    "DecayedDemand",
    "INSUFFICIENT_CAPACITY",
    "INVALID_REQUEST",
    "STRATEGIES",
    "AcceleratorInfo",
    "Assignment",
    "Fleet",
    "Item",
    "Mix",
    "NodeSnapshot",
    "PlacementRequest",
    "PlacementResult",
    "Policy",
    "Workload",
    "as_catalog",
    "choose_mix",
    "place",
]
