"""The meter tick: post every open meter's delta in bulk, a few queries per tick (not per meter).

One transaction under an advisory lock (a second beat does nothing): lock the open meters (skipping
ones a close is posting right now), lock compute_revenue and the organizations' accounts in id
order in chunks, split each meter's chargeable delta over trial → compensation → grant → cash in
memory, then insert all transfers, move all balances, advance all meters and record write-offs
with one statement each. Funds are watched after commit (auto-stop, low-balance warnings).
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
METER_FIELDS = ("pk", "organization_id", "instance_id", "cards", "rate", "opened_at", "posted_through_seconds",
                "posted_amount", "written_off_amount", "billable_until_seconds")


@METER_TICK_SECONDS.time()  # observability: every tick's wall time, watch included
def meter_tick(*, now=None, watch: bool = True) -> dict:
    """Post every open meter through the database now (or `now`); returns counts, or {"skipped": True}."""
    with transaction.atomic():
        if not try_advisory_xact_lock("billing.meter_tick"):
            return {"skipped": True}
        now = now or db_now()
        rows = list(Meter.objects.filter(closed_at__isnull=True).order_by("pk")
                    .select_for_update(skip_locked=True, of=("self",)).values_list(*METER_FIELDS))
        plans = []
        for row in rows:
            m = dict(zip(METER_FIELDS, row, strict=True))
            plan = posting_plan(rate=m["rate"], cards=m["cards"], posted_through=m["posted_through_seconds"],
                                accounted=m["posted_amount"] + m["written_off_amount"],
                                seconds=whole_seconds(m["opened_at"], now),
                                billable_until=m["billable_until_seconds"])
            if plan is not None:
                plans.append((m, plan))
        stats = _post_plans(plans)
    if watch and plans:
        from .watch import funds_watch

        funds_watch(org_ids={m["organization_id"] for m, _ in plans}, now=now)
    return stats


def _post_plans(plans) -> dict:
    """Post the planned meter deltas (inside the tick's transaction, meters already locked)."""
    stats = {"meters": len(plans), "transfers": 0, "write_offs": 0, "charged": 0, "written_off": 0}
    if not plans:
        return stats
    org_ids = {m["organization_id"] for m, _ in plans}
    ids = org_account_ids(org_ids)
    revenue = platform_id(AccountKind.COMPUTE_REVENUE)
    # Platform ids are negative, so compute_revenue sorts first: one global pk lock order, in chunks.
    all_ids = sorted({revenue, *(pk for per_org in ids.values() for pk in per_org.values())})
    accounts = {}
    for start in range(0, len(all_ids), LOCK_CHUNK):
        accounts.update(accounts_lock_all(all_ids[start:start + LOCK_CHUNK]))
    limits = dict(BillingProfile.objects.filter(organization_id__any_array=list(org_ids)).values_list("organization_id",
                                                                                          "credit_limit"))
    balances = {o: {kind: accounts[pk].balance for kind, pk in per_org.items()} for o, per_org in ids.items()}
    transfers, deltas, meter_rows, write_offs = [], defaultdict(int), [], []
    for m, plan in plans:
        org = m["organization_id"]
        key = f"meter:{m['pk']}:{plan.seconds}"
        charged = 0
        if plan.chargeable > 0:
            parts, _ = spend_split(balances=balances[org], credit_limit=limits.get(org, 0), amount=plan.chargeable)
            for kind, amount in parts.items():
                balances[org][kind] -= amount
                source = ids[org][kind]
                deltas[source] -= amount
                deltas[revenue] += amount
                charged += amount
                transfers.append((f"{key}:{kind}", source, revenue, amount, m["pk"], m["instance_id"]))
        written_off = plan.delta - charged
        meter_rows.append((m["pk"], plan.seconds, m["posted_amount"] + charged, m["written_off_amount"] + written_off))
        if written_off > 0:
            write_offs.append(WriteOff(
                meter_id=m["pk"], organization_id=org, key=key, amount=written_off,
                seconds=writeoff_seconds(rate=m["rate"], cards=m["cards"], amount=written_off,
                                         span=plan.seconds - m["posted_through_seconds"])))
        stats["charged"] += charged
        stats["written_off"] += written_off
    _insert_transfers(transfers)
    failpoint("billing.tick:after_transfers")
    balances_apply(deltas)
    failpoint("billing.tick:after_balances")
    _advance_meters(meter_rows)
    if write_offs:
        WriteOff.objects.bulk_create(write_offs)
    failpoint("billing.tick:before_commit")
    stats["transfers"] = len(transfers)
    stats["write_offs"] = len(write_offs)
    return stats


def _insert_transfers(rows) -> None:
    """Insert meter transfers in one statement (unnest of arrays on PostgreSQL)."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        Transfer.objects.bulk_create([
            Transfer(key=k, debit_account_id=d, credit_account_id=c, amount=a, code=TransferCode.METER, meter_id=mid,
                     instance_id=iid) for k, d, c, a, mid, iid in rows])
        return
    cols = list(zip(*rows, strict=True))
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO billing_transfer (key, debit_account_id, credit_account_id, amount, code, meter_id, "
            "instance_id, payment_ref, grant_ref, created_at) "
            "SELECT k, d, c, a, %s, m, i, '', '', statement_timestamp() "
            "FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::uuid[]) "
            "AS t(k, d, c, a, m, i)",
            [TransferCode.METER.value, list(cols[0]), list(cols[1]), list(cols[2]), list(cols[3]), list(cols[4]),
             [str(i) for i in cols[5]]])


def _advance_meters(rows) -> None:
    """Set each meter's posted-through second and amounts in one statement."""
    if connection.vendor != "postgresql":
        for pk, through, posted, written in rows:
            Meter.objects.filter(pk=pk).update(posted_through_seconds=through, posted_amount=posted,
                                               written_off_amount=written)
        return
    cols = list(zip(*rows, strict=True))
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE billing_meter AS m SET posted_through_seconds = v.s, posted_amount = v.p, "
            "written_off_amount = v.w FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[]) "
            "AS v(id, s, p, w) WHERE m.id = v.id",
            [list(c) for c in cols])
