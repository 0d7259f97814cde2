"""The meter tick: post every open meter's delta in bulk, a few queries per tick (not per meter).

One transaction under an advisory lock (a second beat does nothing): lock the open meters (skipping
ones a close is posting right now), lock compute_revenue and the organizations' accounts in id
order in chunks, split each meter's chargeable delta over trial → compensation → grant → cash in
memory, then insert all transfers, move all balances and advance all meters in one statement
(data-modifying CTEs on PostgreSQL), and record write-offs. Funds are watched after commit (auto-stop, low-balance warnings).
"""
from collections import defaultdict

from django.db import connection, transaction

from core.dbclock import db_now
from core.failpoints import failpoint
from core.locks import try_advisory_xact_lock
from core.metrics import METER_TICK_SECONDS

from .choices import AccountKind, TransferCode
from .funds import spend_split
from .ledger import accounts_lock_all, balances_apply, org_account_ids, platform_id
from .models import BillingProfile, Meter, Transfer, WriteOff
from .rating import posting_plan, whole_seconds, writeoff_seconds

LOCK_CHUNK = 5000
METER_FIELDS = ("pk", "organization_id", "cards", "rate", "elapsed", "posted_through_seconds", "posted_amount",
                "written_off_amount", "billable_until_seconds")
# Organization ids travel as text and the elapsed whole seconds (rating.whole_seconds: floored, never negative,
# exact since EXTRACT is numeric) come computed: parsing tens of thousands of UUIDs and timestamps per tick
# costs more than the SQL.
METERS_SQL = """
SELECT id, organization_id::text, cards, rate, greatest(floor(extract(epoch FROM %s - opened_at)), 0)::bigint,
       posted_through_seconds, posted_amount, written_off_amount, billable_until_seconds
FROM billing_meter WHERE closed_at IS NULL ORDER BY id FOR UPDATE SKIP LOCKED
"""


def _open_meters_locked(now):
    """The open meters' fields (METER_FIELDS, seconds elapsed at `now`), locked, skipping any a close is posting."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(METERS_SQL, [now])
            return cur.fetchall()
    fields = [f if f != "elapsed" else "opened_at" for f in METER_FIELDS]
    return [(pk, str(org), cards, rate, whole_seconds(opened_at, now), *rest)
            for pk, org, cards, rate, opened_at, *rest in
            Meter.objects.filter(closed_at__isnull=True).order_by("pk").select_for_update(skip_locked=True)
            .values_list(*fields)]


@METER_TICK_SECONDS.time()  # observability: every tick's wall time, watch included
def meter_tick(*, now=None, watch: bool = True) -> dict:
    """Post every open meter through the database now (or `now`); returns counts, or {"skipped": True}."""
    with transaction.atomic():
        if not try_advisory_xact_lock("billing.meter_tick"):
            return {"skipped": True}
        now = now or db_now()
        plans = []
        for row in _open_meters_locked(now):
            m = dict(zip(METER_FIELDS, row, strict=True))
            plan = posting_plan(rate=m["rate"], cards=m["cards"], posted_through=m["posted_through_seconds"],
                                accounted=m["posted_amount"] + m["written_off_amount"],
                                seconds=m["elapsed"],
                                billable_until=m["billable_until_seconds"])
            if plan is not None:
                plans.append((m, plan))
        stats = _post_plans(plans)
    if watch:
        from .watch import funds_flags_clear_idle, funds_watch

        if plans:
            funds_watch(org_ids={m["organization_id"] for m, _ in plans}, now=now)
        funds_flags_clear_idle()
    return stats


def _post_plans(plans) -> dict:
    """Post the planned meter deltas (inside the tick's transaction, meters already locked)."""
    stats = {"meters": len(plans), "transfers": 0, "write_offs": 0, "charged": 0, "written_off": 0}
    if not plans:
        return stats
    revenue = platform_id(AccountKind.COMPUTE_REVENUE)
    org_ids = {m["organization_id"] for m, _ in plans}
    ids, balances, limits = _lock_accounts(org_ids, [m["pk"] for m, _ in plans], revenue)
    transfers, meter_rows, write_offs = [], [], []
    for m, plan in plans:
        org = m["organization_id"]
        charged = 0
        if plan.chargeable > 0:
            parts, _ = spend_split(balances=balances[org], credit_limit=limits.get(org, 0), amount=plan.chargeable)
            for kind, amount in parts.items():
                balances[org][kind] -= amount
                charged += amount
                transfers.append((m["pk"], plan.seconds, kind, ids[org][kind], amount))
        written_off = plan.delta - charged
        meter_rows.append((m["pk"], plan.seconds, m["posted_amount"] + charged, m["written_off_amount"] + written_off))
        if written_off > 0:
            write_offs.append(WriteOff(
                meter_id=m["pk"], organization_id=org, key=f"meter:{m['pk']}:{plan.seconds}", amount=written_off,
                seconds=writeoff_seconds(rate=m["rate"], cards=m["cards"], amount=written_off,
                                         span=plan.seconds - m["posted_through_seconds"])))
        stats["charged"] += charged
        stats["written_off"] += written_off
    if connection.vendor == "postgresql":
        _post_pg(transfers, meter_rows, revenue)
    else:
        _post_portable(transfers, meter_rows, revenue)
    failpoint("billing.tick:after_post")
    if write_offs:
        WriteOff.objects.bulk_create(write_offs)
    failpoint("billing.tick:before_commit")
    stats["transfers"] = len(transfers)
    stats["write_offs"] = len(write_offs)
    return stats


LOCK_SQL = """
SELECT a.id, a.organization_id::text, a.kind, a.balance, coalesce(p.credit_limit, 0)
FROM billing_account a LEFT JOIN billing_billingprofile p ON p.organization_id = a.organization_id
WHERE a.organization_id IN (SELECT organization_id FROM billing_meter
                            WHERE id = ANY(string_to_array(%s, ',')::bigint[]))
  AND (a.kind = 'cash' OR a.balance > 0) AND a.id > %s
ORDER BY a.id LIMIT %s FOR UPDATE OF a
"""


def _lock_accounts(org_ids, meter_ids, revenue):
    """Lock compute_revenue, then the accounts this tick may debit in id order, LOCK_CHUNK rows at a time.

    Returns ({org: {kind: id}}, {org: {kind: balance}}, {org: credit_limit}) for the locked rows.
    Only cash and the credits that hold money are locked (usually just cash); an empty credit is
    never debited, and one that a concurrent grant fills is spent from the next tick on — as if the
    grant came after this tick, which does not observe it. Accounts exist from meter_open on; an
    organization without a cash account is completed and locked after the others (new ids are
    higher, so the order holds).
    """
    accounts_lock_all([revenue])  # the negative id: first
    ids, balances, limits = defaultdict(dict), defaultdict(dict), {}

    def take(rows):
        for pk, org, kind, balance, limit in rows:
            ids[org][kind] = pk
            balances[org][kind] = balance
            limits[org] = limit

    if connection.vendor == "postgresql":
        meter_ids, last = ",".join(map(str, meter_ids)), 0  # as in _post_pg: one text, not 10k elements
        with connection.cursor() as cur:
            while True:
                cur.execute(LOCK_SQL, [meter_ids, last, LOCK_CHUNK])
                rows = cur.fetchall()
                take(rows)
                # A row waited for that no longer matches (a credit emptied meanwhile) is rechecked and left out
                # before LIMIT counts, so only the last chunk comes back short (tests/billing/test_tick_chunks.py).
                if len(rows) < LOCK_CHUNK:
                    break
                last = rows[-1][0]
    else:
        per_org = org_account_ids(org_ids)
        locked = accounts_lock_all(pk for d in per_org.values() for pk in d.values())
        take((a.pk, str(a.organization_id), a.kind, a.balance, 0) for a in locked.values())
    incomplete = [o for o in org_ids if AccountKind.CASH not in ids[o]]
    if incomplete:
        per_org = org_account_ids(incomplete)
        locked = accounts_lock_all(pk for d in per_org.values() for pk in d.values())
        take((a.pk, str(a.organization_id), a.kind, a.balance, 0) for a in locked.values())
    if connection.vendor != "postgresql" or incomplete:
        limits.update((str(o), limit) for o, limit in BillingProfile.objects.filter(
            organization_id__any_array=list(org_ids)).values_list("organization_id", "credit_limit"))
    return ids, balances, limits


POST_SQL = """
WITH t AS (
  INSERT INTO billing_transfer (key, debit_account_id, credit_account_id, amount, code, meter_id, instance_id,
                                payment_ref, grant_ref, created_at)
  SELECT 'meter:' || v.m || ':' || v.s || ':' || v.k, v.d, %(revenue)s, v.a, %(code)s, v.m, mt.instance_id, '', '',
         statement_timestamp()
  FROM unnest(string_to_array(%(m)s, ',')::bigint[], string_to_array(%(s)s, ',')::bigint[],
              string_to_array(%(k)s, ','), string_to_array(%(d)s, ',')::bigint[],
              string_to_array(%(a)s, ',')::bigint[]) AS v(m, s, k, d, a)
  JOIN billing_meter mt ON mt.id = v.m
  RETURNING debit_account_id, amount
), b AS (
  UPDATE billing_account AS acc SET balance = acc.balance + x.delta
  FROM (SELECT debit_account_id AS id, -sum(amount) AS delta FROM t GROUP BY debit_account_id
        UNION ALL SELECT %(revenue)s, sum(amount) FROM t HAVING count(*) > 0) AS x
  WHERE acc.id = x.id
  RETURNING 1
), mm AS (
  UPDATE billing_meter AS me SET posted_through_seconds = u.s, posted_amount = u.p, written_off_amount = u.w
  FROM unnest(string_to_array(%(mid)s, ',')::bigint[], string_to_array(%(ms)s, ',')::bigint[],
              string_to_array(%(mp)s, ',')::bigint[], string_to_array(%(mw)s, ',')::bigint[]) AS u(id, s, p, w)
  WHERE me.id = u.id
  RETURNING 1
)
SELECT (SELECT count(*) FROM t), (SELECT count(*) FROM b), (SELECT count(*) FROM mm)
"""


def _post_pg(transfers, meter_rows, revenue) -> None:
    """Insert the transfers, move the balances and advance the meters in one statement (data-modifying CTEs).

    The columns travel as comma-joined text (integers and account-kind words, never a comma inside):
    adapting tens of thousands of list elements one by one cost more than the statement itself."""
    tcols = list(zip(*transfers, strict=True)) if transfers else [(), (), (), (), ()]
    mcols = list(zip(*meter_rows, strict=True))
    csv = [",".join(map(str, col)) for col in (*tcols, *mcols)]
    params = {"revenue": revenue, "code": TransferCode.METER.value, **dict(zip(
        ("m", "s", "k", "d", "a", "mid", "ms", "mp", "mw"), csv, strict=True))}
    with connection.cursor() as cur:
        cur.execute(POST_SQL, params)
        inserted, _, advanced = cur.fetchone()
    if inserted != len(transfers) or advanced != len(meter_rows):  # never expected: refuse to commit a partial tick
        raise RuntimeError(f"meter tick posted {inserted}/{len(transfers)} transfers, "
                           f"advanced {advanced}/{len(meter_rows)} meters")


def _post_portable(transfers, meter_rows, revenue) -> None:
    """The same posting with the ORM (SQLite development database)."""
    instance_ids = dict(Meter.objects.filter(pk__in={t[0] for t in transfers}).values_list("pk", "instance_id"))
    Transfer.objects.bulk_create([
        Transfer(key=f"meter:{mid}:{sec}:{kind}", debit_account_id=debit, credit_account_id=revenue, amount=amount,
                 code=TransferCode.METER, meter_id=mid, instance_id=instance_ids[mid])
        for mid, sec, kind, debit, amount in transfers])
    deltas = defaultdict(int)
    for _, _, _, debit, amount in transfers:
        deltas[debit] -= amount
        deltas[revenue] += amount
    balances_apply(deltas)
    for pk, through, posted, written in meter_rows:
        Meter.objects.filter(pk=pk).update(posted_through_seconds=through, posted_amount=posted,
                                           written_off_amount=written)
