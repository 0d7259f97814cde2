"""The double-entry core: accounts on demand, and posting immutable transfers idempotently.

Every posting locks the accounts it touches in pk order, checks the idempotency keys, inserts the
transfers and moves the materialised balances — all in the caller's transaction. Balance =
credits − debits (see models.py).
"""
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from django.db import connection, transaction

from core.errors import ServiceError

from .choices import ORG_KINDS, PLATFORM_IDS, AccountKind
from .lock_objects import accounts_lock
from .models import Account, BillingProfile, Transfer


class TransferKeyReused(ServiceError):
    """The idempotency key exists with different fields."""

    status, code = 422, "idempotency_key_reused"


@dataclass(frozen=True)
class Leg:
    """One transfer to post: amount µCNY from debit_id to credit_id."""

    key: str
    debit_id: int
    credit_id: int
    amount: int
    code: str
    meter_id: int | None = None
    instance_id: object = None
    payment_ref: str = ""
    grant_ref: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    def matches(self, t: Transfer) -> bool:
        """Whether an existing transfer is this very leg (a replay)."""
        return (t.debit_account_id, t.credit_account_id, t.amount, t.code, t.meter_id,
                str(t.instance_id) if t.instance_id else None, t.payment_ref, t.grant_ref) == (
            self.debit_id, self.credit_id, self.amount, self.code, self.meter_id,
            str(self.instance_id) if self.instance_id else None, self.payment_ref, self.grant_ref)

    def to_model(self) -> Transfer:
        return Transfer(key=self.key, debit_account_id=self.debit_id, credit_account_id=self.credit_id,
                        amount=self.amount, code=self.code, meter_id=self.meter_id, instance_id=self.instance_id,
                        payment_ref=self.payment_ref, grant_ref=self.grant_ref)


def platform_id(kind: str) -> int:
    """The fixed id of a platform account."""
    return PLATFORM_IDS[AccountKind(kind)]


def platform_accounts_ensure() -> None:
    """Create the platform accounts if missing (they are also created by a data migration)."""
    Account.objects.bulk_create([Account(id=i, organization=None, kind=k) for k, i in PLATFORM_IDS.items()],
                                ignore_conflicts=True)


def org_account_ids(org_ids) -> dict:
    """{org_id (UUID): {kind: account_id}} for these organizations, creating missing accounts and profiles."""
    org_ids = {o if isinstance(o, uuid.UUID) else uuid.UUID(str(o)) for o in org_ids}
    found: dict = defaultdict(dict)
    for org_id, kind, pk in Account.objects.filter(organization_id__any_array=list(org_ids)).values_list(
            "organization_id", "kind", "pk"):
        found[org_id][kind] = pk
    missing = [Account(organization_id=o, kind=k) for o in org_ids for k in ORG_KINDS if k not in found[o]]
    if missing:
        Account.objects.bulk_create(missing, ignore_conflicts=True)
        BillingProfile.objects.bulk_create([BillingProfile(organization_id=o) for o in org_ids],
                                           ignore_conflicts=True)
        for org_id, kind, pk in Account.objects.filter(organization_id__any_array=list(org_ids)).values_list(
                "organization_id", "kind", "pk"):
            found[org_id][kind] = pk
    return {o: dict(found[o]) for o in org_ids}


def accounts_lock_all(ids) -> dict[int, Account]:
    """Lock accounts in pk order, creating platform accounts first if a test database lacks them."""
    ids = set(ids)
    locked = accounts_lock(ids)
    if len(locked) != len(ids) and ids & set(PLATFORM_IDS.values()):
        platform_accounts_ensure()
        locked = accounts_lock(ids)
    if len(locked) != len(ids):
        raise Account.DoesNotExist(f"accounts {sorted(ids - set(locked))} do not exist")
    return locked


def balances_apply(deltas: dict[int, int]) -> None:
    """Add each delta to its account's balance in one statement (callers hold the row locks)."""
    deltas = {k: v for k, v in deltas.items() if v}
    if not deltas:
        return
    with connection.cursor() as cur:
        cur.execute("UPDATE billing_account AS a SET balance = a.balance + v.d "
                    "FROM unnest(%s::bigint[], %s::bigint[]) AS v(id, d) WHERE a.id = v.id",
                    [list(deltas), list(deltas.values())])


def legs_post(legs: list[Leg], *, locked: bool = False, fresh: bool = False) -> list[Transfer]:
    """Post legs idempotently, atomically; returns their transfers (originals for replays).

    A key that exists with identical fields is a replay and changes nothing; with different fields
    it raises TransferKeyReused. Unless `locked`, the accounts are locked here in pk order first,
    which also serialises concurrent posts of the same key (the second then sees the first's row).
    `fresh`: the caller holds the locks and has just found none of the keys (funds.spend), so the keys are not
    looked up again (one round trip less on every stop).
    """
    legs = [leg for leg in legs]
    for leg in legs:
        if leg.amount <= 0:
            raise ValueError(f"transfer amount must be > 0, got {leg.amount} for {leg.key}")
    if not legs:
        return []
    # `fresh` (a spend, inside its own block): nothing here can fail but the database, so no savepoint of its own.
    with transaction.atomic(savepoint=not fresh):
        if not locked:
            accounts_lock_all({i for leg in legs for i in (leg.debit_id, leg.credit_id)})
        existing = {} if fresh else {t.key: t for t in Transfer.objects.filter(key__in=[leg.key for leg in legs])}
        new, result = [], []
        for leg in legs:
            t = existing.get(leg.key)
            if t is not None:
                if not leg.matches(t):
                    raise TransferKeyReused(f"Transfer key {leg.key!r} was used with different fields.",
                                            details={"key": [leg.key]})
                result.append(t)
            else:
                t = leg.to_model()
                new.append(t)
                result.append(t)
        if new:
            Transfer.objects.bulk_create(new)
            deltas: dict[int, int] = defaultdict(int)
            for t in new:
                deltas[t.debit_account_id] -= t.amount
                deltas[t.credit_account_id] += t.amount
            balances_apply(deltas)
        return result


def leg_post(leg: Leg) -> Transfer:
    """Post one transfer idempotently."""
    return legs_post([leg])[0]
