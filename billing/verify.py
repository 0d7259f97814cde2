"""Recompute every balance from the transfers and report differences (SPEC §4: a periodic job)."""
import logging

from django.db import connection, transaction

from core.locks import try_advisory_xact_lock

logger = logging.getLogger("cardmix.billing")


VERIFY_SQL = """
SELECT a.id, a.organization_id, a.kind, a.balance, coalesce(c.s, 0) - coalesce(d.s, 0) AS recomputed
FROM billing_account a
LEFT JOIN (SELECT credit_account_id AS id, sum(amount) AS s FROM billing_transfer GROUP BY credit_account_id) c
  ON c.id = a.id
LEFT JOIN (SELECT debit_account_id AS id, sum(amount) AS s FROM billing_transfer GROUP BY debit_account_id) d
  ON d.id = a.id
"""


def ledger_verify() -> list[str]:
    """[] when every materialised balance equals credits − debits and all balances sum to zero."""
    # One statement = one consistent snapshot of accounts and transfers while posting continues;
    # two hash aggregates over the transfers, linear in their number.
    problems, total = [], 0
    with connection.cursor() as cur:
        cur.execute(VERIFY_SQL)
        for pk, org_id, kind, balance, recomputed in cur.fetchall():
            total += balance
            if balance != recomputed:
                problems.append(f"account {pk} ({org_id or 'platform'}:{kind}) balance {balance} != "
                                f"recomputed {recomputed}")
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
