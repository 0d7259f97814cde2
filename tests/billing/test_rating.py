"""Pure posting arithmetic: cumulative floor deltas never drift, whatever the tick timing."""
import random
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from billing.funds import spend_split
from billing.rating import cumulative_charge, posting_plan, whole_seconds, writeoff_seconds

H100 = 1_900_000  # µCNY per card-hour
THIRTY_DAYS = 30 * 86400


def run_schedule(rate, cards, seconds_list, billable_until=None):
    """Apply postings at these seconds; returns (posted_through, charged, written_off)."""
    through, charged, written = 0, 0, 0
    for s in seconds_list:
        plan = posting_plan(rate=rate, cards=cards, posted_through=through, accounted=charged + written, seconds=s,
                            billable_until=billable_until)
        if plan is None:
            continue
        through = plan.seconds
        charged += plan.chargeable
        written += plan.delta - plan.chargeable
    return through, charged, written


def test_thirty_days_of_one_h100_under_random_ticks_is_exactly_1368_cny():
    rng = random.Random(20261129)
    ticks, s = [], 0
    while s < THIRTY_DAYS:
        s = min(s + rng.randint(1, 90), THIRTY_DAYS)
        ticks.append(s)
    assert len(ticks) > 50_000
    through, charged, written = run_schedule(H100, 1, ticks)
    assert (through, charged, written) == (THIRTY_DAYS, 1_368_000_000, 0)


@given(rate=st.integers(0, 50_000_000), cards=st.integers(1, 64),
       gaps=st.lists(st.integers(-30, 5000), min_size=1, max_size=80))
def test_any_schedule_with_stale_and_replayed_ticks_totals_the_floor(rate, cards, gaps):
    seconds, s = [], 0
    for g in gaps:  # negative gaps are stale/replayed ticks computing an earlier second
        s = max(s + g, 0)
        seconds.append(s)
    final = max(seconds)
    through, charged, written = run_schedule(rate, cards, seconds)
    assert through == final
    assert charged == cumulative_charge(rate, cards, final) == rate * cards * final // 3600
    assert written == 0


@given(rate=st.integers(1, 50_000_000), cards=st.integers(1, 16), until=st.integers(0, 10_000),
       seconds=st.lists(st.integers(0, 20_000), min_size=1, max_size=40))
def test_billable_until_charges_exactly_up_to_the_exhaustion_second(rate, cards, until, seconds):
    through, charged, written = run_schedule(rate, cards, seconds, billable_until=until)
    assert charged + written == cumulative_charge(rate, cards, through)
    assert charged == cumulative_charge(rate, cards, min(through, until))


def test_whole_seconds_floors_and_never_goes_negative():
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    assert whole_seconds(t0, t0 + timedelta(seconds=59, microseconds=999_999)) == 59
    assert whole_seconds(t0, t0 + timedelta(days=30)) == THIRTY_DAYS
    assert whole_seconds(t0, t0 - timedelta(seconds=5)) == 0


def test_spend_split_order_and_credit_limit():
    balances = {"trial": 5, "compensation": 0, "grant": 3, "cash": 10}
    assert spend_split(balances=balances, credit_limit=0, amount=12) == ({"trial": 5, "grant": 3, "cash": 4}, 0)
    assert spend_split(balances=balances, credit_limit=7, amount=30) == (
        {"trial": 5, "grant": 3, "cash": 17}, 5)
    # cash already below −limit (after a refund): nothing more from cash
    assert spend_split(balances={"cash": -50}, credit_limit=10, amount=4) == ({}, 4)


def test_writeoff_seconds_rounds_up_within_the_span():
    assert writeoff_seconds(rate=3600, cards=1, amount=10, span=60) == 10
    assert writeoff_seconds(rate=3600, cards=1, amount=1000, span=60) == 60
    assert writeoff_seconds(rate=H100, cards=1, amount=1, span=60) == 1
