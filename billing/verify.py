"""Recompute every balance from the transfers and report differences (SPEC §4: a periodic job).

The full run sums every transfer ever posted; the incremental run (the beat's) sums only the transfers after
the stored checkpoint onto each account's checkpoint total, so its cost follows what was posted since. The
checkpoint advances only over transfers older than VERIFY_SETTLE_SECONDS, below the first younger one: a
transaction still open with a lower transfer id would otherwise commit behind it, unseen by every later run.
(So the incremental run assumes no posting transaction stays open longer than that; the full run assumes
nothing, and the beat's incremental run confirms any difference with a full one before reporting it.)"""
import logging

from django.conf import settings
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


# The transfers after the checkpoint (new), the settled prefix of them (through w2), their per-account sums (d);
# the checkpoint moves to w2 in the same statement (up, mark: data-modifying CTEs always run); the final SELECT still
# reads the checkpoint as it was before the statement.
INCREMENTAL_SQL = """
WITH cp AS (SELECT coalesce(max(through_transfer_id), 0) AS w FROM billing_ledgercheckpoint),
new AS MATERIALIZED (
  SELECT t.id, t.debit_account_id, t.credit_account_id, t.amount,
         t.created_at < statement_timestamp() - make_interval(secs => %(settle)s) AS settled
  FROM billing_transfer t WHERE t.id > (SELECT w FROM cp)
), w2 AS (
  SELECT coalesce(max(id), (SELECT w FROM cp)) AS w FROM new
  WHERE settled AND id < coalesce((SELECT min(id) FROM new WHERE NOT settled), 9223372036854775807)
), legs AS (
  SELECT credit_account_id AS acc, amount AS s, id FROM new UNION ALL SELECT debit_account_id, -amount, id FROM new
), d AS MATERIALIZED (
  SELECT acc, sum(s) AS s, sum(s) FILTER (WHERE id <= (SELECT w FROM w2)) AS settled FROM legs GROUP BY acc
), up AS (
  INSERT INTO billing_accountcheckpoint (account_id, total) SELECT acc, settled FROM d WHERE settled IS NOT NULL
  ON CONFLICT (account_id) DO UPDATE SET total = billing_accountcheckpoint.total + excluded.total
  RETURNING 1
), mark AS (
  INSERT INTO billing_ledgercheckpoint (id, through_transfer_id, verified_at) SELECT 1, w, statement_timestamp() FROM w2
  ON CONFLICT (id) DO UPDATE SET through_transfer_id = excluded.through_transfer_id, verified_at = excluded.verified_at
  RETURNING 1
)
SELECT a.id, a.organization_id, a.kind, a.balance, coalesce(c.total, 0) + coalesce(d.s, 0)
FROM billing_account a LEFT JOIN billing_accountcheckpoint c ON c.account_id = a.id LEFT JOIN d ON d.acc = a.id
WHERE a.balance <> coalesce(c.total, 0) + coalesce(d.s, 0)
UNION ALL SELECT NULL, NULL, 'total', coalesce(sum(balance), 0), 0 FROM billing_account
"""

# The per-meter detail (MeterCharge) against the meters and the transfers, each one statement (one snapshot): every
# meter's rows sum to its posted_amount, and every organization's metered transfers (a tick's per source account,
# key tick:…; a close's per meter) to its meters' rows.
METER_DETAIL_SQL = """
SELECT 'meter ' || m.id, m.posted_amount, coalesce(c.s, 0) FROM billing_meter m
LEFT JOIN (SELECT meter_id, sum(amount) AS s FROM billing_metercharge GROUP BY meter_id) c ON c.meter_id = m.id
WHERE m.posted_amount <> coalesce(c.s, 0)
"""
ORG_DETAIL_SQL = """
SELECT 'organization ' || coalesce(t.org, c.org), coalesce(t.s, 0), coalesce(c.s, 0)
FROM (SELECT a.organization_id AS org, sum(tr.amount) AS s FROM billing_transfer tr
      JOIN billing_account a ON a.id = tr.debit_account_id
      WHERE tr.code = 'meter' AND (tr.meter_id IS NOT NULL OR tr.key LIKE 'tick:%') AND a.organization_id IS NOT NULL
      GROUP BY a.organization_id) t
FULL JOIN (SELECT m.organization_id AS org, sum(mc.amount) AS s FROM billing_metercharge mc
           JOIN billing_meter m ON m.id = mc.meter_id GROUP BY m.organization_id) c ON c.org = t.org
WHERE coalesce(t.s, 0) <> coalesce(c.s, 0)
"""


def meter_detail_verify() -> list[str]:
    """[] when each meter's MeterCharge rows sum to its posted_amount and each organization's metered transfers to
    its meters' rows (the full run's part: it reads every row)."""
    problems = []
    with connection.cursor() as cur:
        for sql, what in ((METER_DETAIL_SQL, "posted"), (ORG_DETAIL_SQL, "metered transfers")):
            cur.execute(sql)
            problems += [f"{who}: {what} {left} != meter charges {right}" for who, left, right in cur.fetchall()]
    return problems


def ledger_verify(*, full: bool = True) -> list[str]:
    """[] when every materialised balance equals credits − debits and all balances sum to zero.

    `full=False`: incremental from the stored checkpoint, which it advances."""
    # One statement = one consistent snapshot of accounts and transfers while posting continues.
    problems, total = [], 0
    incremental = not full
    with connection.cursor() as cur:
        if incremental:
            cur.execute(INCREMENTAL_SQL, {"settle": settings.VERIFY_SETTLE_SECONDS})
        else:
            cur.execute(VERIFY_SQL)
        for pk, org_id, kind, balance, recomputed in cur.fetchall():
            if incremental and pk is None:  # the sum of all balances
                total = balance
                continue
            if not incremental:
                total += balance
            if balance != recomputed:
                problems.append(f"account {pk} ({org_id or 'platform'}:{kind}) balance {balance} != "
                                f"recomputed {recomputed}")
    if total != 0:
        problems.append(f"balances sum to {total}, not 0")
    if not incremental:
        problems += meter_detail_verify()
    for p in problems:
        logger.error("ledger verification: %s", p)
    return problems


def ledger_verify_locked(*, full: bool = False) -> list[str] | None:
    """ledger_verify (incremental unless `full`) under its advisory lock; None when another run holds it.

    Differences an incremental run finds are confirmed by a full run, whose answer is returned."""
    with transaction.atomic():
        if not try_advisory_xact_lock("billing.verify_ledger"):
            return None
        problems = ledger_verify(full=full)
        return ledger_verify(full=True) if problems and not full else problems
