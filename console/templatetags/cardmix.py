"""Template filters for the console: money rounded to the fen for display only, times in one named zone,
and small labels."""
import re
from datetime import datetime

from django import template

from billing.choices import TransferCode
from billing.zone import billing_tz, local_time, zone_label
from core.money import DISPLAY_MINUS, format_fen, format_ucny

from ..catalog_names import VENDOR_NAMES

register = template.Library()

ACCOUNT_LABELS = {"trial": "Trial credit", "compensation": "Compensation", "grant": "Grant", "cash": "Cash"}


@register.filter
def fen(amount_ucny):
    """µCNY → "¥12.35", "−¥382.16" (display only; the API keeps µCNY exact)."""
    if amount_ucny is None or amount_ucny == "":
        return "—"
    return format_fen(int(amount_ucny))


@register.filter
def rate(price_ucny):
    """A price per hour or card-hour, exact: "¥1.235" (a monthly rate), "¥1.90"; at least two decimals, never
    rounded, so a row's subtotal is what its rate times its cards reads."""
    if price_ucny is None or price_ucny == "":
        return "—"
    amount = int(price_ucny)
    text = format_ucny(abs(amount)).rstrip("0")
    whole, _, decimals = text.partition(".")
    return f"{_sign(amount)}¥{whole}.{decimals.ljust(2, '0')}"


@register.filter
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


@register.filter
def vendor(slug):
    """nvidia → NVIDIA."""
    return VENDOR_NAMES.get(slug, slug)


@register.filter
def account_label(kind):
    """trial → Trial credit."""
    return ACCOUNT_LABELS.get(kind, kind)


@register.filter
def transfer_label(code):
    """trial_expiry → Trial credit expired (what a ledger line was for, as the ledger page says it)."""
    return dict(TransferCode.choices).get(code, code)


@register.filter
def reason(text, kind=""):
    """An instance's state reason, or an event's, as a sentence: "create: placed" → "Cards placed; the machine is
    being prepared." (display only; the API keeps the reason). `|reason:instance.kind`: some read differently for
    bare metal."""
    from ..state_reasons import reason_for_people  # it imports service_text, which imports this module

    return reason_for_people(text, kind or "")


@register.filter
def duration(seconds):
    """Seconds → "2 h 05 min" / "42 s"."""
    if seconds in (None, ""):
        return "—"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, _ = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours >= 48:
        return f"{hours // 24} days {hours % 24} h"
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"


# --- times: the console shows every time in the billing time zone (where statement days and months and the spend
# chart's days fall), each with its zone named, so no UTC time sits unlabelled next to a Shanghai one (billing/zone.py).

@register.filter
def when(value, fmt="Y-m-d H:i"):
    """A datetime in the billing time zone with its zone: "2026-11-20 18:30 UTC+8" ('' for none)."""
    if not isinstance(value, datetime):
        return ""
    return local_time(value, fmt)


@register.filter
def day(value):
    """The date of a datetime in the billing time zone ("2026-11-21"): the day a statement puts it on."""
    if not isinstance(value, datetime):
        return ""
    return value.astimezone(billing_tz()).date().isoformat()


@register.simple_tag(name="zone_label")
def zone_label_tag():
    """{% zone_label %} → "UTC+8", for headings and form labels."""
    return zone_label()


@register.filter
def stop_warning(kind):
    """container → "Its cards are released and its container deleted with its disk: …": what a stop deletes."""
    from ..state_reasons import stop_warning as warning  # see `reason`

    return warning(kind or "")


@register.filter
def terminate_warning(kind):
    """bare_metal → "Its nodes are released and their disks wiped; …": what a termination deletes."""
    from ..state_reasons import terminate_warning as warning  # see `reason`

    return warning(kind or "")


BYTES = re.compile(r"(?<![\w.])(\d+) ?B\b")
BINARY_UNITS = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def bytes_for_people(count: int) -> str:
    """8589934592 → "8 GiB", 1610612736 → "1.5 GiB", 512 → "512 B" (binary units, as nccl-tests sizes are)."""
    for size, unit in BINARY_UNITS:
        if count >= size:
            value = count / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{count} B"


@register.filter
def readiness_error(text):
    """A readiness report's reason as people read it: byte counts as "8 GiB" ("… at 8589934592 B" → "… at 8 GiB");
    the API keeps the bytes."""
    return BYTES.sub(lambda m: bytes_for_people(int(m.group(1))), str(text or ""))


@register.simple_tag(name="zone_name")
def zone_name_tag():
    """{% zone_name %} → "Asia/Shanghai" (BILLING_TIME_ZONE), beside the offset where a page explains its times."""
    return billing_tz().key
