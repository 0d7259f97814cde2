"""Money is exact integer µCNY; strings at the edges only."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.money import MoneyError, format_fen, format_price_per_second, format_ucny, parse_cny


def test_format_and_parse():
    assert format_ucny(31_666) == "0.031666"
    assert format_ucny(-1) == "-0.000001"
    assert format_ucny(1_368_000_000) == "1368.000000"
    assert parse_cny("100.00") == 100_000_000
    assert parse_cny("0.000001") == 1
    assert format_price_per_second(1_900_000) == "0.000527777"
    assert format_fen(12_345_678) == "¥12.35"


@pytest.mark.parametrize("bad", ["", "abc", "1.0000001", "NaN", "Infinity", "-1", None, True, "1e30",
                                 "1e999999", "1E+999999"])
def test_parse_refuses_bad_amounts(bad):
    with pytest.raises(MoneyError):
        parse_cny(bad)


@given(st.integers(min_value=-(10**14), max_value=10**14))
def test_round_trip(amount):
    assert parse_cny(format_ucny(amount), allow_negative=True) == amount


def test_huge_negative_exponent_is_refused_not_an_overflow():
    with pytest.raises(MoneyError, match="too large"):
        parse_cny("-1e999999", allow_negative=True)
    assert parse_cny("1e9") == 10**15  # the largest amount still accepted
