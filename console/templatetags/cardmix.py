"""Template filters for the console: money rounded to the fen for display only, times in one named zone,
and small labels."""
import re
from datetime import datetime

from django import template
from django.utils.translation import gettext, gettext_lazy

from billing.choices import TransferCode
from billing.zone import billing_tz, local_time, zone_label
from provisioning.choices import InstanceState

from ..catalog_names import VENDOR_NAMES
from ..money_text import fen, per_second, rate
from ..state_reasons import reason_for_people
from ..state_reasons import stop_warning as _stop_warning
from ..state_reasons import terminate_warning as _terminate_warning

register = template.Library()

ACCOUNT_LABELS = {"trial": gettext_lazy("Trial credit"), "compensation": gettext_lazy("Compensation"), "grant": gettext_lazy("Grant"), "cash": gettext_lazy("Cash")}


# Money: plain formatters in console/money_text.py (service_text uses them too).
register.filter(fen)
register.filter(rate)
register.filter(per_second)


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
def state_word(state):
    """running → "running" in English, "运行中" in Chinese: an instance state as a word of the page's language."""
    if state not in InstanceState.values:
        return state or ""
    return str(InstanceState(state).label).lower()


@register.filter
def reason(text, kind=""):
    """An instance's state reason, or an event's, as a sentence: "create: placed" → "Cards placed; the machine is
    being prepared." (display only; the API keeps the reason). `|reason:instance.kind`: some read differently for
    bare metal."""
    return reason_for_people(text, kind or "")


# webhooks/delivery.py and webhooks/services.py store why an endpoint was disabled in English (the API's
# `disabled_reason`); the console says it in the page's language.
AUTO_DISABLED = re.compile(r"^Disabled after (\d+) failed attempts over (\d+(?:\.\d+)?) (days|hours)\.$")


@register.filter
def webhook_disabled_reason(text):
    """"Disabled after 9 failed attempts over 3.0 days." → the same sentence in the page's language."""
    text = str(text or "")
    if text == "Disabled by a member.":
        return gettext("Disabled by a member.")
    if m := AUTO_DISABLED.match(text):
        amount = float(m.group(2))
        span = (gettext("%(days).1f days") % {"days": amount} if m.group(3) == "days"
                else gettext("%(hours).1f hours") % {"hours": amount})
        return gettext("Disabled after %(attempts)s failed attempts over %(span)s.") % {
            "attempts": m.group(1), "span": span}
    return text


@register.filter
def duration(seconds):
    """Seconds → "2 h 05 min" / "42 s"."""
    if seconds in (None, ""):
        return "—"
    seconds = int(seconds)
    if seconds < 60:
        return gettext("%(seconds)d s") % {"seconds": seconds}
    minutes, _ = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours >= 48:
        return gettext("%(days)d days %(hours)d h") % {"days": hours // 24, "hours": hours % 24}
    if hours:
        return gettext("%(hours)d h %(minutes)02d min") % {"hours": hours, "minutes": minutes}
    return gettext("%(minutes)d min") % {"minutes": minutes}


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
    return _stop_warning(kind or "")


@register.filter
def terminate_warning(kind):
    """bare_metal → "Its nodes are released and their disks wiped; …": what a termination deletes."""
    return _terminate_warning(kind or "")


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
