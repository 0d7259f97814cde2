"""Recompute every balance from the transfers and report differences (SPEC §4: a periodic job)."""
import logging

from django.db import transaction
from django.db.models import OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from core.locks import try_advisory_xact_lock

from .models import Account, Transfer

logger = logging.getLogger("cardmix.billing")


def ledger_verify() -> list[str]:
    """[] when every materialised balance equals credits − debits and all balances sum to zero."""
    # One statement = one consistent snapshot of accounts and transfers while posting continues.
    credits = Transfer.objects.filter(credit_account=OuterRef("pk")).values("credit_account") \
        .annotate(s=Sum("amount")).values("s")
    debits = Transfer.objects.filter(debit_account=OuterRef("pk")).values("debit_account") \
        .annotate(s=Sum("amount")).values("s")
    rows = Account.objects.annotate(
        c=Coalesce(Subquery(credits), Value(0)), d=Coalesce(Subquery(debits), Value(0))
    ).values_list("pk", "organization_id", "kind", "balance", "c", "d")
    problems, total = [], 0
    for pk, org_id, kind, balance, c, d in rows:
        total += balance
        if balance != c - d:
            problems.append(f"account {pk} ({org_id or 'platform'}:{kind}) balance {balance} != "
                            f"recomputed {c - d}")
    if total != 0:
        problems.append(f"balances sum to {total}, not 0")
    for p in problems:
        logger.error("ledger verification: %s", p)
    return problems


def ledger_verify_locked() -> list[str] | None:
    """ledger_verify under the reconciler's advisory lock; None when another run holds it."""
    with transaction.atomic():
        if not try_advisory_xact_lock("billing.verify_ledger"):
            return None
        return ledger_verify()
