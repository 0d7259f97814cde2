"""Money is integer µCNY (1 CNY = 1,000,000 µCNY) inside; decimal strings only at the edges."""
from decimal import ROUND_DOWN, Decimal, InvalidOperation

from django.utils.translation import gettext

UCNY_PER_CNY = 1_000_000
_SIX = Decimal("0.000001")
_NINE = Decimal("0.000000001")


class MoneyError(ValueError):
    """A money string that is not an exact, finite amount."""


def format_ucny(amount: int) -> str:
    """µCNY → "12.345678" (exactly 6 decimals, as the API shows money)."""
    if not isinstance(amount, int):
        raise TypeError(f"money must be int µCNY, got {type(amount).__name__}")
    sign = "-" if amount < 0 else ""
    whole, frac = divmod(abs(amount), UCNY_PER_CNY)
    return f"{sign}{whole}.{frac:06d}"


def parse_cny(text, *, allow_negative: bool = False, max_decimals: int = 6) -> int:
    """"100.00" → 100_000_000 µCNY; refuses more than `max_decimals` decimals, NaN, infinity, junk."""
    if isinstance(text, bool) or not isinstance(text, (str, int, Decimal)):
        raise MoneyError(gettext("Enter the amount as a decimal string, e.g. \"100.00\"."))
    try:
        value = Decimal(str(text).strip())
    except InvalidOperation as exc:
        raise MoneyError(gettext("Not a decimal amount.")) from exc
    if not value.is_finite():
        raise MoneyError(gettext("Not a finite amount."))
    if value.as_tuple().exponent < -max_decimals:
        raise MoneyError(gettext("At most %(decimals)s decimal places.") % {"decimals": max_decimals})
    if value < 0 and not allow_negative:
        raise MoneyError(gettext("The amount must not be negative."))
    if value and value.adjusted() > 9:  # checked before multiplying: 1e999999 × 10⁶ overflows the context
        raise MoneyError(gettext("The amount is too large."))
    ucny = value * UCNY_PER_CNY
    if abs(ucny) > 10**15:
        raise MoneyError(gettext("The amount is too large."))
    return int(ucny)


def format_price_per_second(rate_per_hour_ucny: int) -> str:
    """A per-hour µCNY rate as CNY per second with 9 decimals (truncated, never rounded up)."""
    per_second = Decimal(rate_per_hour_ucny) / Decimal(3600) / Decimal(UCNY_PER_CNY)
    return str(per_second.quantize(_NINE, rounding=ROUND_DOWN))


# The console's minus (U+2212) goes before the currency sign: "−¥382.16", never "¥-382.16".
DISPLAY_MINUS = "\u2212"


def format_fen(amount: int, *, rounding: str = "ROUND_HALF_UP") -> str:
    """Console display only: µCNY rounded (half-up unless told) to the fen, e.g. "¥12.35", "−¥382.16"."""
    value = (Decimal(amount) / UCNY_PER_CNY).quantize(Decimal("0.01"), rounding=rounding)
    sign = DISPLAY_MINUS if value < 0 else ""  # what rounds to ¥0.00 carries no sign
    return f"{sign}¥{abs(value):,.2f}"
