"""Pure posting arithmetic for meters (SPEC §4 Money): no database, no clock."""
from dataclasses import dataclass
from datetime import datetime


def cumulative_charge(rate: int, cards: int, seconds: int) -> int:
    """µCNY owed after `seconds` whole running seconds: floor(rate × cards × seconds / 3600)."""
    return rate * cards * seconds // 3600


def whole_seconds(start: datetime, end: datetime) -> int:
    """Whole seconds from start to end (floored, never negative), exact in integer microseconds."""
    delta = end - start
    micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    return max(micros // 1_000_000, 0)


@dataclass(frozen=True)
class Posting:
    """What one posting through `seconds` does: `chargeable` to spend, the rest of `delta` is written off."""

    seconds: int
    delta: int  # cumulative(seconds) − already accounted
    chargeable: int  # the part of delta up to the billable-until second


def posting_plan(*, rate: int, cards: int, posted_through: int, accounted: int, seconds: int,
                 billable_until: int | None = None) -> Posting | None:
    """The next posting of a meter through `seconds`, or None when there is nothing new (a stale or replayed tick).

    `accounted` = posted + written off so far = cumulative(posted_through). Seconds after
    `billable_until` (the auto-stop exhaustion second) are never charged.
    """
    if seconds <= posted_through:
        return None
    delta = cumulative_charge(rate, cards, seconds) - accounted
    if billable_until is None:
        chargeable = delta
    else:
        through = max(min(seconds, billable_until), posted_through)
        chargeable = cumulative_charge(rate, cards, through) - accounted
    return Posting(seconds=seconds, delta=delta, chargeable=chargeable)


def writeoff_seconds(*, rate: int, cards: int, amount: int, span: int) -> int:
    """Seconds an uncharged amount stands for (rounded up, at most the posting's span)."""
    per_hour = rate * cards
    if amount <= 0 or per_hour <= 0:
        return 0
    return min(span, -(-amount * 3600 // per_hour))
