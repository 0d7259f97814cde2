"""Spending and available funds: trial → compensation → grant → cash (down to −credit limit)."""
import math
import uuid
from datetime import timedelta
from fractions import Fraction

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum
from django.utils.translation import gettext

from core.errors import InsufficientFunds
from core.money import format_ucny

from .choices import SPEND_ORDER, AccountKind
from .ledger import Leg, TransferKeyReused, accounts_lock_all, legs_post, org_account_ids, platform_id
from .lock_objects import org_accounts_lock
from .models import Account, BillingProfile, Meter, Transfer


def _org_id(org):
    """An organization or its id → its UUID."""
    org_id = getattr(org, "pk", org)
    return org_id if isinstance(org_id, uuid.UUID) else uuid.UUID(str(org_id))


def spend_split(*, balances: dict[str, int], credit_limit: int, amount: int) -> tuple[dict[str, int], int]:
    """Pure: how much of `amount` each source covers, in spending order; returns (parts, uncharged)."""
    parts: dict[str, int] = {}
    rest = amount
    for kind in SPEND_ORDER:
        room = balances.get(kind, 0) + (credit_limit if kind == AccountKind.CASH else 0)
        take = min(rest, max(room, 0))
        if take > 0:
            parts[kind] = take
            rest -= take
    return parts, rest


def spend_legs(*, key: str, ids: dict[str, int], parts: dict[str, int], code: str, meter_id=None,
               instance_id=None) -> list[Leg]:
    """The transfers of one spend: `<key>:<source kind>` from each source into compute_revenue."""
    revenue = platform_id(AccountKind.COMPUTE_REVENUE)
    return [Leg(key=f"{key}:{kind}", debit_id=ids[kind], credit_id=revenue, amount=amt, code=code,
                meter_id=meter_id, instance_id=instance_id) for kind, amt in parts.items()]


def spend(*, org, amount: int, key: str, code: str, meter_id=None, instance_id=None) -> int:
    """Charge `amount` µCNY in spending order as one atomic group of transfers; returns what could not be charged.

    Replaying a key that already posted returns the original shortfall and posts nothing. A spend
    that could charge nothing leaves no transfer: callers that must not repeat it (meters) record it.
    """
    if amount < 0:
        raise ValueError("spend amount must be >= 0")
    org_id = _org_id(org)
    revenue = platform_id(AccountKind.COMPUTE_REVENUE)
    keys = [f"{key}:{kind}" for kind in SPEND_ORDER]
    # No savepoint (two round trips on every stop): the one refusal, a reused key, is raised outside the block, so
    # a caller's transaction goes on after it as before.
    with transaction.atomic(savepoint=False):
        # One statement finds and locks the accounts (a stop's spend); a new organization's are created first.
        accounts = org_accounts_lock(org_id, also=[revenue])
        ids = {a.kind: pk for pk, a in accounts.items() if a.organization_id == org_id and a.kind in SPEND_ORDER}
        credit_limit = accounts[revenue].credit_limit if revenue in accounts else None
        if len(ids) < len(SPEND_ORDER) or credit_limit is None:
            ids = org_account_ids([org_id])[org_id]  # creates the accounts and the profile
            accounts = accounts_lock_all([*ids.values(), revenue])
            credit_limit = BillingProfile.objects.filter(pk=org_id).values_list("credit_limit", flat=True).first()
        done = list(Transfer.objects.filter(key__in=keys))
        reused = any(t.debit_account_id not in ids.values() or t.code != code for t in done)
        if not reused:
            if done:
                return max(amount - sum(t.amount for t in done), 0)
            if amount == 0:
                return 0
            balances = {kind: accounts[pk].balance for kind, pk in ids.items()}
            parts, uncharged = spend_split(balances=balances, credit_limit=credit_limit or 0, amount=amount)
            legs_post(spend_legs(key=key, ids=ids, parts=parts, code=code, meter_id=meter_id,
                                 instance_id=instance_id),
                      locked=True, fresh=True)  # under the locks, none of the keys exists (`done` above)
            return uncharged
    raise TransferKeyReused(f"Spend key {key!r} was used with different fields.")


def balances_of(org) -> dict[str, int]:
    """{kind: balance} of the organization's accounts (0 for accounts not created yet), plus credit_limit."""
    org_id = _org_id(org)
    out = {kind: 0 for kind in SPEND_ORDER}
    out.update(dict(Account.objects.filter(organization_id=org_id).values_list("kind", "balance")))
    out["credit_limit"] = BillingProfile.objects.filter(pk=org_id).values_list("credit_limit", flat=True).first() or 0
    return out


def available_from(balances: dict[str, int]) -> int:
    """trial + compensation + grant + cash + credit limit (negative after a refund below the limit)."""
    return sum(balances.get(k, 0) for k in SPEND_ORDER) + balances.get("credit_limit", 0)


def available_funds(org) -> int:
    """What the organization can still spend, µCNY."""
    return available_from(balances_of(org))


def burn_rate_per_hour(org) -> int:
    """µCNY per hour of the organization's open meters: Σ rate × cards (one query)."""
    total = Meter.objects.filter(organization_id=_org_id(org), closed_at__isnull=True).aggregate(
        s=Sum(F("rate") * F("cards")))["s"]
    return int(total or 0)


def exhaustion(*, available: int, burn_per_hour: int, now):
    """When funds run out at this burn (None when nothing burns); not adjusted for unposted seconds."""
    if burn_per_hour <= 0:
        return None
    seconds = max(available, 0) * 3600 // burn_per_hour
    return now + timedelta(seconds=seconds)


def funds_check(*, org, price_per_hour: int, hours: float | None = None) -> None:
    """Raise InsufficientFunds unless available funds cover `hours` (default FUNDS_MIN_MINUTES) of this price."""
    # Exact rational arithmetic: 10 minutes of 1.9 CNY/h is 316,667 µCNY (rounded up), never a float artefact.
    exact_hours = Fraction(settings.FUNDS_MIN_MINUTES, 60) if hours is None else Fraction(str(hours))
    hours = float(exact_hours)
    needed = math.ceil(price_per_hour * exact_hours)
    available = available_funds(org)
    if available < needed:
        raise InsufficientFunds(
            gettext('Available funds %(format_ucny)s CNY do not cover %(format_ucny2)s CNY (%(hours)s h at %(format_ucny3)s CNY/h). Top up first.') % {'format_ucny': format_ucny(available), 'format_ucny2': format_ucny(needed), 'hours': format(hours, 'g'), 'format_ucny3': format_ucny(price_per_hour)},
            details={"available": format_ucny(available), "required": format_ucny(needed)},
        )
