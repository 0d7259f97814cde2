"""Input and output records of the placement engine (plain dataclasses, no Django)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

CONTAINER = "container"
BARE_METAL = "bare_metal"
KINDS = (CONTAINER, BARE_METAL)
AVAILABLE = "available"
# A container is at most one 8-card node's worth of cards (SPEC §3 "Kinds").
MAX_CONTAINER_CARDS = 8
INSUFFICIENT_CAPACITY = "insufficient_capacity"
INVALID_REQUEST = "invalid_request"


@dataclass(frozen=True)
class NodeSnapshot:
    """One node as the engine sees it: which of its cards are free right now."""

    id: Hashable
    zone: str
    accelerator: str
    card_count: int
    free: frozenset[int]
    state: str = AVAILABLE
    # Last readiness busbw over the accelerator's floor (1.0: at the floor; 0: never measured). Multi-node and
    # bare-metal requests prefer the nodes far above it among otherwise equal ones.
    busbw_headroom: float = 0.0


@dataclass(frozen=True)
class AcceleratorInfo:
    """Catalog entry of one accelerator type; price in integer µCNY per card-hour."""

    slug: str
    vendor: str
    domestic: bool
    price_per_card_hour: int


@dataclass(frozen=True)
class Item:
    """A part of a request: `count` cards of one accelerator."""

    accelerator: str
    count: int


@dataclass(frozen=True)
class Policy:
    """Let the engine choose the cheapest mix of compatible accelerators."""

    total_cards: int
    compatible_vendors: tuple[str, ...]
    min_domestic_share: float = 0.0


@dataclass(frozen=True)
class PlacementRequest:
    """What to place: explicit items or a policy, of one kind, optionally pinned to a zone."""

    kind: str
    items: tuple[Item, ...] = ()
    policy: Policy | None = None
    zone: str | None = None


@dataclass(frozen=True)
class Assignment:
    """Exact cards on one node given to one item (policy mixes may span several nodes per item)."""

    item_index: int
    accelerator: str
    node_id: Hashable
    zone: str
    card_indices: tuple[int, ...]


@dataclass
class PlacementResult:
    """The decision: assignments and the chosen mix, or why nothing was placed."""

    ok: bool
    assignments: list[Assignment] = field(default_factory=list)
    items: list[Item] = field(default_factory=list)
    price_per_hour: int = 0
    domestic_share: float = 0.0
    error_code: str | None = None
    message: str = ""
    missing: dict[str, int] = field(default_factory=dict)

    @classmethod
    def invalid(cls, message: str) -> PlacementResult:
        """A request that can never be placed as written."""
        return cls(ok=False, error_code=INVALID_REQUEST, message=message)

    @classmethod
    def insufficient(cls, missing: dict[str, int], message: str = "") -> PlacementResult:
        """A valid request that does not fit the free capacity now."""
        # The text for the engine's own callers; the API words it from `missing` (services/specs.placement_message).
        text = message or "not enough free capacity: " + ", ".join(
            f"{acc} short by {n}" for acc, n in sorted(missing.items())
        )
        return cls(ok=False, error_code=INSUFFICIENT_CAPACITY, message=text, missing=dict(missing))

    @property
    def card_count(self) -> int:
        """Total cards assigned."""
        return sum(len(a.card_indices) for a in self.assignments)
