"""Service refusals as the console shows them: sentences for people.

Services word their messages for API callers, who match and fix requests by them: zero-based "item 0: …"
prefixes, lowercase starts, catalog, vendor and kind slugs, request-syntax hints. The console rewords them
here, on display only; the API's messages and codes stay as they are."""
import re
from decimal import ROUND_CEILING, ROUND_FLOOR

from django.utils.translation import gettext, pgettext_lazy

from core.money import format_fen, parse_cny
from provisioning.choices import InstanceState

from .catalog_names import VENDOR_NAMES, named
from .money_text import rate

ITEM_PREFIX = re.compile(r"^item (\d+): ")
REQUEST_SYNTAX = re.compile(r"\s*\([^()]*\{[^()]*\}[^()]*\)")  # '(hybrid: images: {"nvidia": …})'
SLUG_WORDS = {**VENDOR_NAMES, "bare_metal": "bare metal"}
SLUG_WORD = re.compile(rf"(?<![\w-])({'|'.join(map(re.escape, SLUG_WORDS))})(?![\w-])")
# "…, so it cannot be stopped": the verb's participle (its own context: the state "stopped" reads differently).
DONE = {"stop": pgettext_lazy("cannot be", "stopped"), "start": pgettext_lazy("cannot be", "started"),
        "terminate": pgettext_lazy("cannot be", "terminated")}
FRACTION_HOURS = re.compile(r"\((0\.\d+) h at ")  # funds_check's "(0.166667 h at …)": its minutes
CNY_AMOUNT = re.compile(r"(?<![\w.])(-?\d+\.\d{6}) CNY(/h)?")  # the API's "506.506229 CNY", "35.360000 CNY/h"
# funds_check's comparison: funds shown rounded down and the need up, so it never reads "¥10.00 do not cover ¥10.00".
NOT_COVERED = re.compile(r"(?<![\w.])(-?\d+\.\d{6}) CNY do not cover (-?\d+\.\d{6}) CNY")


def _fen(amount: str, rounding: str) -> str:
    ucny = parse_cny(amount, allow_negative=True)
    return format_fen(ucny, rounding=rounding)


def _not_covered(m) -> str:
    return f"{_fen(m.group(1), ROUND_FLOOR)} do not cover {_fen(m.group(2), ROUND_CEILING)}"


def _money(m) -> str:
    """An API money string as the console shows money: "¥506.51", a rate exact as "¥35.36/h"."""
    ucny = parse_cny(m.group(1), allow_negative=True)
    return f"{rate(ucny)}/h" if m.group(2) else format_fen(ucny)


def money_for_people(text: str) -> str:
    """The API's money in a message as the console writes it: "¥506.51", "¥35.36/h", "(10 min at …)"."""
    text = CNY_AMOUNT.sub(_money, NOT_COVERED.sub(_not_covered, str(text)))
    return FRACTION_HOURS.sub(lambda m: f"({round(float(m.group(1)) * 60)} min at ", text)


def for_people(text, *, items=1) -> str:
    """One service message as a sentence: names for slugs; money as "¥506.51"; a capital and a stop. An API
    "item 1: …" prefix, when the request had several items, names the item's accelerator ("Huawei Ascend 910B:
    count …", or nothing when the sentence names it already) given `items` as the items' display names, else
    "Item 2: " (1-based, as the form counts) given their number; a single item gets no prefix."""
    names = [] if isinstance(items, int) else list(items)
    count = items if isinstance(items, int) else len(names)
    text = money_for_people(REQUEST_SYNTAX.sub("", str(text)))
    prefix, index = "", None
    if m := ITEM_PREFIX.match(text):
        text = text[m.end():]
        index = int(m.group(1))
    text = named(SLUG_WORD.sub(lambda w: str(SLUG_WORDS[w.group(1)]), text))  # named() also capitalises
    if index is not None and count > 1:
        name = names[index] if index < len(names) else ""
        prefix = "" if name and name in text else f"{name}: " if name else gettext('Item %(index___1)s: ') % {'index___1': index + 1}
    if text[-1:].isalnum():
        text += "."
    return prefix + text


def action_refusal(exc, *, action: str, items: int) -> str:
    """A refused stop / start / terminate. A state refusal (a page older than the instance's state) says what the
    instance is now, rather than the transition table's state names."""
    state = (exc.details or {}).get("state") if exc.code == "invalid_state" else None
    if state and state[0] in InstanceState.values and action in DONE:
        return gettext('The instance is %(InstanceState)s now, so it cannot be %(DONE)s.') % {'InstanceState': InstanceState(state[0]).label.lower(), 'DONE': DONE[action]}
    return for_people(exc.message, items=items)
