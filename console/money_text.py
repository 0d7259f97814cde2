"""Money as the console writes it: plain formatters (display only; the API keeps µCNY exact) that the
template filters and service_text both use."""
from core.money import DISPLAY_MINUS, format_fen, format_ucny


def fen(amount_ucny):
    """µCNY → "¥12.35", "−¥382.16" (display only; the API keeps µCNY exact)."""
    if amount_ucny is None or amount_ucny == "":
        return "—"
    return format_fen(int(amount_ucny))


def rate(price_ucny):
    """A price per hour or card-hour, exact: "¥1.235" (a monthly rate), "¥1.90"; at least two decimals, never
    rounded, so a row's subtotal is what its rate times its cards reads."""
    if price_ucny is None or price_ucny == "":
        return "—"
    amount = int(price_ucny)
    text = format_ucny(abs(amount)).rstrip("0")
    whole, _, decimals = text.partition(".")
    return f"{_sign(amount)}¥{whole}.{decimals.ljust(2, '0')}"


def per_second(price_per_hour_ucny):
    """µCNY per hour → "¥0.001056" per second (six decimals: a second costs less than a fen)."""
    if price_per_hour_ucny in (None, ""):
        return "—"
    amount = int(price_per_hour_ucny)
    per_second = abs(amount) // 3600  # truncated towards zero, whatever the sign
    return f"{_sign(amount) if per_second else ''}¥{format_ucny(per_second)}"


def _sign(amount: int) -> str:
    """The minus before the currency sign, as format_fen writes it."""
    return DISPLAY_MINUS if amount < 0 else ""
