"""The meter tick: every open meter's delta posted set-based, in short transactions of CHUNK meters each.

The chunks walk the open meters in (organization, id) order, so one chunk, rarely two, locks an organization's
accounts: a stop issued during the tick waits only if the chunk in flight holds its organization.

A session advisory lock makes a second beat do nothing. Each chunk is one statement in its own transaction:
lock the next CHUNK open meters (skipping ones a close is posting right now), lock their organizations'
accounts in id order, split each meter's chargeable delta over trial → compensation → grant → cash with
window sums (the same greedy split as funds.spend_split, meter by meter in id order), insert one transfer per
source account (organization × source: `tick:<first meter>:<its second>:<source>`, no meter or instance) and
one narrow MeterCharge row per charged meter (the per-meter detail: what it was charged and through which
second), move the balances, advance the meters and record the write-offs. The tick credits its own revenue shard
(AccountKind.TICK_REVENUE), which no other posting locks: a stop or terminate during a tick waits at most
for the one chunk that holds its own meters or accounts, never for the tick as a whole. A crash loses only
the chunk in flight; the chunks before it committed whole, and the next tick posts the rest (cumulative
floor deltas: nothing is charged twice). Funds are watched after the last chunk (watch.funds_watch_open).
"""
from django.db import connection, transaction

from core.dbclock import db_now
from core.failpoints import failpoint
from core.locks import advisory_lock_held
from core.metrics import METER_TICK_SECONDS

from .choices import SPEND_ORDER, AccountKind, TransferCode
from .ledger import org_account_ids, platform_accounts_ensure, platform_id

# Meters per chunk transaction: bounds how long a stop may wait for the tick (its own rows only).
CHUNK = 1000
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
STATS = ("meters", "transfers", "charges", "write_offs", "charged", "written_off")

# m: the chunk's open meters, locked; p: their postings (rating.posting_plan in SQL: integer division of
# non-negative bigints is the floor); c: cumulative chargeable per organization in meter id order; a: the
# accounts that may pay (cash, and credits holding money), locked in id order — a credit emptied while the
# tick waited for it is rechecked and left out; r: cumulative room per organization in spending order (cash
# down to −credit limit); legs: meter i takes from source k the overlap of [c.hi − chg, c.hi) and
# [r.hi − room, r.hi), exactly what spend_split gives meter after meter. t: the legs summed per source account
# (one transfer each); d: each meter's charge (MeterCharge); mm: the meters advanced by their row address (ctid:
# this statement holds their locks, so it cannot move; a row that did not match would not be counted as advanced,
# and the chunk would roll back). w: rating.writeoff_seconds.
CHUNK_SQL = """
WITH m AS MATERIALIZED (
  SELECT ctid AS tid, id, organization_id, instance_id, cards, rate, posted_through_seconds AS pt,
         posted_amount + written_off_amount AS acct, billable_until_seconds AS bu,
         greatest(floor(extract(epoch FROM %(now)s::timestamptz - opened_at)), 0)::bigint AS s
  FROM billing_meter WHERE closed_at IS NULL AND (organization_id, id) > (%(org)s::uuid, %(after)s)
  ORDER BY organization_id, id LIMIT %(chunk)s FOR UPDATE SKIP LOCKED
), p AS MATERIALIZED (
  SELECT tid, id, organization_id, instance_id, rate, cards, pt, s, rate * cards * s / 3600 - acct AS delta,
         CASE WHEN bu IS NULL THEN rate * cards * s / 3600
              ELSE rate * cards * greatest(least(s, bu), pt) / 3600 END - acct AS chg
  FROM m WHERE s > pt
), c AS MATERIALIZED (
  SELECT id, organization_id, instance_id, s, chg, (sum(chg) OVER (PARTITION BY organization_id ORDER BY id))::bigint AS hi
  FROM p WHERE chg > 0
), a AS MATERIALIZED (
  SELECT acc.id, acc.organization_id, acc.kind, acc.balance FROM billing_account acc
  WHERE acc.organization_id IN (SELECT organization_id FROM c) AND acc.kind = ANY(%(kinds)s::varchar[])
    AND (acc.kind = 'cash' OR acc.balance > 0)
  ORDER BY acc.id FOR UPDATE OF acc
), r AS MATERIALIZED (
  SELECT a.id, a.organization_id, a.kind, x.room, (sum(x.room) OVER (PARTITION BY a.organization_id ORDER BY x.ord))::bigint AS hi
  FROM a LEFT JOIN billing_billingprofile bp ON bp.organization_id = a.organization_id
  CROSS JOIN LATERAL (SELECT array_position(%(kinds)s::varchar[], a.kind) AS ord,
                             greatest(a.balance + CASE WHEN a.kind = 'cash' THEN coalesce(bp.credit_limit, 0)
                                                       ELSE 0 END, 0) AS room) x
), legs AS MATERIALIZED (
  SELECT c.id AS meter_id, c.s, c.instance_id, r.id AS account_id, r.kind,
         least(c.hi, r.hi) - greatest(c.hi - c.chg, r.hi - r.room) AS amount
  FROM c JOIN r ON r.organization_id = c.organization_id
  WHERE least(c.hi, r.hi) > greatest(c.hi - c.chg, r.hi - r.room)
), t AS (
  INSERT INTO billing_transfer (key, debit_account_id, credit_account_id, amount, code, meter_id, instance_id,
                                payment_ref, grant_ref, created_at)
  SELECT 'tick:' || array_to_string(min(array[meter_id, s]), ':') || ':' || kind, account_id, %(revenue)s,
         sum(amount), %(code)s, NULL, NULL, '', '', statement_timestamp()
  FROM legs GROUP BY account_id, kind
  RETURNING 1
), b AS (
  UPDATE billing_account AS acc SET balance = acc.balance + x.delta
  FROM (SELECT account_id AS id, -sum(amount) AS delta FROM legs GROUP BY account_id
        UNION ALL SELECT %(revenue)s, sum(amount) FROM legs HAVING count(*) > 0) AS x
  WHERE acc.id = x.id
  RETURNING 1
), per AS MATERIALIZED (
  SELECT p.tid, p.id, p.organization_id, p.rate, p.cards, p.s, p.pt, p.delta, coalesce(l.charged, 0)::bigint AS charged
  FROM p LEFT JOIN (SELECT meter_id, sum(amount) AS charged FROM legs GROUP BY meter_id) l ON l.meter_id = p.id
), mm AS (
  UPDATE billing_meter AS me SET posted_through_seconds = per.s, posted_amount = me.posted_amount + per.charged,
                                 written_off_amount = me.written_off_amount + per.delta - per.charged
  FROM per WHERE me.ctid = per.tid
  RETURNING me.id = per.id AS same
), d AS (
  INSERT INTO billing_metercharge (meter_id, through_seconds, amount, created_at)
  SELECT id, s, charged, statement_timestamp() FROM per WHERE charged > 0
  RETURNING 1
), w AS (
  INSERT INTO billing_writeoff (meter_id, organization_id, key, seconds, amount, reviewed, created_at)
  SELECT id, organization_id, 'meter:' || id || ':' || s,
         CASE WHEN rate * cards <= 0 THEN 0
              ELSE least(s - pt, ((delta - charged) * 3600 + rate * cards - 1) / (rate * cards)) END,
         delta - charged, false, statement_timestamp()
  FROM per WHERE delta > charged
  RETURNING 1
)
SELECT (SELECT count(*) FROM m),
       (SELECT array[organization_id::text, id::text] FROM m ORDER BY organization_id DESC, id DESC LIMIT 1), (SELECT count(*) FROM per), (SELECT count(*) FROM t),
       (SELECT count(*) FROM w), (SELECT coalesce(sum(charged), 0) FROM per),
       (SELECT coalesce(sum(delta - charged), 0) FROM per), (SELECT count(*) FROM b), (SELECT count(*) FILTER (WHERE same) FROM mm),
       (SELECT count(*) FROM d), (SELECT count(*) FROM per WHERE charged > 0), (SELECT count(DISTINCT account_id) FROM legs),
       (SELECT array_agg(DISTINCT c.organization_id::text) FROM c
        WHERE NOT EXISTS (SELECT 1 FROM a WHERE a.organization_id = c.organization_id AND a.kind = 'cash'))
"""


class _AccountsMissing(Exception):
    """Organizations with chargeable meters but no cash account: roll the chunk back, create them, redo it."""

    def __init__(self, org_ids):
        super().__init__(org_ids)
        self.org_ids = org_ids


@METER_TICK_SECONDS.time()  # observability: every tick's wall time, watch included
def meter_tick(*, now=None, watch: bool = True) -> dict:
    """Post every open meter through the database now (or `now`); returns counts, or {"skipped": True}."""
    with advisory_lock_held("billing.meter_tick") as held:  # the key of the former transaction lock
        if not held:
            return {"skipped": True}
        now = now or db_now()
        stats = _tick_chunks(now)
        if watch:
            from .watch import funds_flags_clear_idle, funds_watch_open

            funds_watch_open(now=now)
            funds_flags_clear_idle()
    return stats


def _tick_chunks(now) -> dict:
    """Chunk after chunk in meter id order, each its own transaction, until a chunk comes back short."""
    stats = dict.fromkeys(STATS, 0)
    params = {"now": now, "chunk": CHUNK, "revenue": platform_id(AccountKind.TICK_REVENUE),
              "code": TransferCode.METER.value, "kinds": [str(k) for k in SPEND_ORDER]}
    after = (ZERO_UUID, 0)  # (organization, meter id) of the last meter of the previous chunk
    platform_accounts_ensure()  # the revenue shard (a data migration makes it; a flushed test database lacks it)
    while True:
        try:
            scanned, last, counts = _chunk(params, after)
        except _AccountsMissing as missing:
            org_account_ids(missing.org_ids)  # meter_open makes them; a meter written directly may lack them
            continue
        for k, v in counts.items():
            stats[k] += v
        if scanned < CHUNK:
            return stats
        after = last


def _chunk(params, after) -> tuple[int, tuple, dict]:
    """Post one chunk of meters after `after` (organization, id); returns (meters scanned, the last, counts)."""
    with transaction.atomic(), connection.cursor() as cur:
        # Every step of the chunk by index: its cost follows the chunk, never the size of the meter or account
        # tables (the planner cannot see how few rows the CTEs carry and would scan them whole, chunk after chunk).
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute(CHUNK_SQL, {**params, "org": after[0], "after": after[1]})
        (scanned, last, posted, transfers, write_offs, charged, written_off, moved, advanced, details, charged_meters,
         debited, missing) = cur.fetchone()
        if missing:
            raise _AccountsMissing(missing)
        if (transfers != debited or details != charged_meters or advanced != posted
                or moved != debited + (1 if debited else 0)):  # never expected: refuse to commit
            raise RuntimeError(f"meter tick posted {transfers}/{debited} transfers, {details}/{charged_meters} "
                               f"meter charges, advanced {advanced}/{posted} meters, moved {moved} balances")
        failpoint("billing.tick:after_post")
        failpoint("billing.tick:before_commit")
    return scanned, (last[0], int(last[1])) if last else after, {
        "meters": posted, "transfers": transfers, "charges": details, "write_offs": write_offs,
        "charged": int(charged), "written_off": int(written_off)}

