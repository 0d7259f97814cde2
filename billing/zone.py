"""The billing time zone (BILLING_TIME_ZONE): where statement days and months fall, and the one zone people read
times in — the console and the emails — each time with its zone named, so none sits unlabelled beside another.
The API stays UTC."""
from datetime import datetime
from zoneinfo import ZoneInfo

from django.conf import settings
from django.utils import dateformat, timezone


def billing_tz() -> ZoneInfo:
    return ZoneInfo(settings.BILLING_TIME_ZONE)


def zone_label(at: datetime | None = None) -> str:
    """The billing time zone as an offset at `at` (default now): "UTC+8", "UTC+5:30", "UTC"."""
    offset = (at or timezone.now()).astimezone(billing_tz()).utcoffset()
    minutes = int(offset.total_seconds()) // 60
    if not minutes:
        return "UTC"
    hours, rest = divmod(abs(minutes), 60)
    return f"UTC{'+' if minutes > 0 else '-'}{hours}{f':{rest:02d}' if rest else ''}"


def local_time(value: datetime, fmt: str = "Y-m-d H:i") -> str:
    """A datetime in the billing time zone with its zone (Django date format): "2026-11-20 18:30 UTC+8"."""
    return f"{dateformat.format(value.astimezone(billing_tz()), fmt)} {zone_label(value)}"
