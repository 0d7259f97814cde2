"""Metering benchmark: the meter tick as the beat runs it vs a hand-written SQL baseline, same run.

For each size in --meters, creates its own scratch PostgreSQL database next to DATABASE_URL's (dropped at
the end unless --keep), migrates it, creates the meters spread over --orgs funded organizations (opened 60 s
ago), then times, each inside a transaction that is rolled back so every round starts equal:

- tick:     billing.tick.meter_tick as the beat runs it, funds watch included (lock meters, lock accounts,
            split over trial → … → cash, insert transfers, move balances, advance meters, chunk by chunk;
            then the set-based funds check);
- baseline: the same postings as one hand-written statement (BASELINE below): each meter's delta as a
            MeterCharge row, one transfer per organization's cash account, the balances, the revenue row,
            the meters advanced — no locks, chunks, spending order or funds check. The earlier sessions'
            baseline (one transfer per meter, no meter advance) is timed too, for comparison only.

Then one committed tick runs in a thread while this process stops instances one at a time through the service a
stop request calls (provisioning instance_stop: its own transaction, the meters' close and final postings inside)
and records how long each stop took; first 100 stops with no tick running, for reference.

Goals (the scale goals, SPEC §13): tick ≤ 2× the baseline at every size, tick(largest)/tick(smallest) ≤ 1.1 ×
the size ratio (100k/10k ≤ 11×), p99 of a close during the largest tick ≤ 100 ms.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/cardmix python -m bench.metering --meters 10000 100000
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The baseline: the same postings the tick makes, as one hand-written statement with nothing else: per open meter its
# delta, a MeterCharge row for it, one transfer per organization's cash account (the bench funds cash only, so every
# charge comes from cash and the tick's split is trivial), the balances, the tick's revenue row, the meters advanced.
# No locks beyond what the writes take, no chunks, no spending order, no write-offs, no funds check.
BASELINE = """
WITH d AS MATERIALIZED (
  SELECT m.id, m.organization_id, s.sec, m.rate * m.cards * s.sec / 3600 - m.posted_amount - m.written_off_amount AS amt
  FROM billing_meter m
  CROSS JOIN LATERAL (SELECT floor(extract(epoch FROM (%(now)s - m.opened_at)))::bigint AS sec) s
  WHERE m.closed_at IS NULL AND s.sec > m.posted_through_seconds
), mc AS (
  INSERT INTO billing_metercharge (meter_id, through_seconds, amount, created_at)
  SELECT id, sec, amt, statement_timestamp() FROM d WHERE amt > 0
  RETURNING 1
), agg AS MATERIALIZED (
  SELECT a.id AS account_id, min(array[d.id, d.sec]) AS first, sum(d.amt) AS amt
  FROM d JOIN billing_account a ON a.organization_id = d.organization_id AND a.kind = 'cash'
  WHERE d.amt > 0 GROUP BY a.id
), t AS (
  INSERT INTO billing_transfer (key, debit_account_id, credit_account_id, amount, code, meter_id, instance_id,
                                payment_ref, grant_ref, created_at)
  SELECT 'tick:' || array_to_string(first, ':') || ':cash', account_id, -6, amt, 'meter', NULL, NULL, '', '',
         statement_timestamp()
  FROM agg
  RETURNING 1
), b AS (
  UPDATE billing_account acc SET balance = acc.balance - agg.amt FROM agg WHERE acc.id = agg.account_id
  RETURNING 1
), r AS (
  UPDATE billing_account SET balance = balance + (SELECT coalesce(sum(amt), 0) FROM agg) WHERE id = -6
  RETURNING 1
), mm AS (
  UPDATE billing_meter me SET posted_through_seconds = d.sec, posted_amount = me.posted_amount + greatest(d.amt, 0)
  FROM d WHERE me.id = d.id
  RETURNING 1
)
SELECT (SELECT count(*) FROM t), (SELECT count(*) FROM mc), (SELECT count(*) FROM mm), (SELECT count(*) FROM b),
       (SELECT count(*) FROM r)
"""

# For comparison only (not the goal's baseline): what the raw writes cost when every meter gets a transfer of its
# own, as the tick posted before the per-meter detail moved to MeterCharge (the baseline of the earlier sessions).
PER_METER_INSERT = """
INSERT INTO billing_transfer (key, debit_account_id, credit_account_id, amount, code, meter_id, instance_id,
                              payment_ref, grant_ref, created_at)
SELECT 'meter:' || m.id || ':' || s.sec || ':cash', a.id, -2,
       m.rate * m.cards * s.sec / 3600 - m.posted_amount - m.written_off_amount, 'meter', m.id, m.instance_id,
       '', '', statement_timestamp()
FROM billing_meter m
JOIN billing_account a ON a.organization_id = m.organization_id AND a.kind = 'cash'
CROSS JOIN LATERAL (SELECT floor(extract(epoch FROM (%(now)s - m.opened_at)))::bigint AS sec) s
WHERE m.closed_at IS NULL AND m.rate * m.cards * s.sec / 3600 - m.posted_amount - m.written_off_amount > 0
"""
PER_METER_UPDATE = """
UPDATE billing_account a SET balance = a.balance - d.amount
FROM (SELECT t.debit_account_id AS id, sum(t.amount) AS amount FROM billing_transfer t
      WHERE t.code = 'meter' GROUP BY t.debit_account_id) d
WHERE a.id = d.id
"""
PER_METER_REVENUE = """
UPDATE billing_account SET balance = balance + (SELECT coalesce(sum(amount), 0) FROM billing_transfer
                                               WHERE code = 'meter') WHERE id = -2
"""


def scratch_url(base: str, name: str) -> str:
    parsed = urlparse(base)
    return urlunparse(parsed._replace(path=f"/{name}"))


def admin_exec(base: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(scratch_url(base, "postgres"), autocommit=True) as conn:
        conn.execute(sql)


def populate(n: int, n_orgs: int | None = None) -> None:
    """N open meters over min(N, n_orgs) organizations, their accounts funded through payments_clearing."""
    import uuid

    from django.db import connection

    from billing.ledger import org_account_ids, platform_accounts_ensure
    from billing.models import BillingProfile, Meter
    from tenancy.models import Organization

    platform_accounts_ensure()
    orgs = Organization.objects.bulk_create(
        [Organization(name=f"Bench {i}", slug=f"bench-{i}") for i in range(min(n, n_orgs or n))], batch_size=2000)
    ids = org_account_ids([o.pk for o in orgs])
    BillingProfile.objects.bulk_create([BillingProfile(organization_id=o.pk) for o in orgs], ignore_conflicts=True)
    funding = 10 ** 13  # far from the low-balance warning: the watch checks every organization, acts on none
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO billing_transfer (key, debit_account_id, credit_account_id, amount, code, meter_id, "
            "instance_id, payment_ref, grant_ref, created_at) SELECT 'bench-fund:' || id, -1, id, %s, 'topup', "
            "NULL, NULL, '', '', now() FROM unnest(%s::bigint[]) AS id",
            [funding, [ids[o.pk]["cash"] for o in orgs]])
        cur.execute("UPDATE billing_account SET balance = %s WHERE kind = 'cash' AND organization_id IS NOT NULL",
                    [funding])
        cur.execute("UPDATE billing_account SET balance = -%s WHERE id = -1", [funding * len(orgs)])
    opened = _now()
    Meter.objects.bulk_create(
        [Meter(organization_id=orgs[i % len(orgs)].pk, instance_id=uuid.uuid4(), item_index=0, accelerator="h100",
               cards=1 + i % 8, rate=1_900_000, opened_at=opened) for i in range(n)], batch_size=5000)
    with connection.cursor() as cur:
        cur.execute("UPDATE billing_meter SET opened_at = opened_at - interval '60 seconds'")
        # Steady state, as autovacuum keeps it: the setup's updates leave no dead rows for the tick to step over.
        cur.execute("VACUUM ANALYZE")


def _now():
    from core.dbclock import db_now

    return db_now()


class Rollback(Exception):
    pass


def timed_rolled_back(fn) -> tuple[float, object]:
    """Run fn in a transaction, time it, roll it back."""
    from django.db import transaction

    out = {}
    try:
        with transaction.atomic():
            start = time.perf_counter()
            out["result"] = fn()
            out["elapsed"] = time.perf_counter() - start
            raise Rollback
    except Rollback:
        pass
    return out["elapsed"], out["result"]


def timed_rounds(now, repeat) -> dict:
    """Rolled-back rounds of the baseline and the tick, interleaved; medians and the ratio."""
    from django.db import connection

    from billing.tick import meter_tick

    def baseline():
        with connection.cursor() as cur:
            cur.execute(BASELINE, {"now": now})
            transfers, charges, advanced, _, _ = cur.fetchone()
        return {"transfers": transfers, "charges": charges, "meters": advanced}

    def per_meter():
        with connection.cursor() as cur:
            cur.execute(PER_METER_INSERT, {"now": now})
            inserted = cur.rowcount
            cur.execute(PER_METER_UPDATE)
            cur.execute(PER_METER_REVENUE)
        return inserted

    ticks, bases, olds, stats, rows = [], [], [], None, None
    for _ in range(repeat):
        elapsed, rows = timed_rolled_back(baseline)
        bases.append(elapsed)
        elapsed, stats = timed_rolled_back(lambda: meter_tick(now=now))  # as the beat runs it: watch included
        ticks.append(elapsed)
        olds.append(timed_rolled_back(per_meter)[0])
    tick_s, base_s, old_s = statistics.median(ticks), statistics.median(bases), statistics.median(olds)
    return {"tick_s": round(tick_s, 4), "baseline_s": round(base_s, 4), "ratio": round(tick_s / base_s, 2),
            "tick_runs": [round(x, 4) for x in ticks], "baseline_runs": [round(x, 4) for x in bases],
            "tick_stats": stats, "baseline_rows": rows, "per_meter_baseline_s": round(old_s, 4),
            "ratio_to_per_meter_baseline": round(tick_s / old_s, 2)}


def running_instances(meters) -> list:
    """An Instance row in `running` for each (instance id, organization id) of an open meter: what a stop locks,
    moves and records (the bench's meters are otherwise bare)."""
    from provisioning.models import Instance

    Instance.objects.bulk_create(
        [Instance(id=iid, organization_id=org, name=f"bench-{i}", kind="container", state="running",
                  items=[{"accelerator": "h100", "count": 1, "rate": 1_900_000}], image="bench",
                  images={"nvidia": "bench"}, price_per_hour=1_900_000) for i, (iid, org) in enumerate(meters)],
        batch_size=2000)
    return [iid for iid, _ in meters]


def closes_during_tick(samples_max: int = 2000) -> dict:
    """One committed tick in a thread; meanwhile stop running instances one by one through the service a stop
    request calls (provisioning instance_stop: lock, running → stopping with its meters closed and their final
    deltas posted, the event, the audit row, the outbox row), timing each."""
    import random
    import threading

    from django.db import connections

    from billing.models import Meter
    from billing.tick import meter_tick
    from provisioning.services.instances import instance_stop
    from tenancy.models import Organization

    meters = list(Meter.objects.filter(closed_at__isnull=True).values_list("instance_id", "organization_id"))
    random.Random(26).shuffle(meters)
    meters = meters[:samples_max + 100]
    orgs = Organization.objects.in_bulk({org for _, org in meters})
    org_of = {iid: orgs[org] for iid, org in meters}
    instances = running_instances(meters)
    started, out = threading.Event(), {}

    def stop(instance_id):
        instance_stop(org=org_of[instance_id], instance_id=instance_id, actor=None)

    def tick():
        try:
            started.set()
            t0 = time.perf_counter()
            out["stats"] = meter_tick()
            out["tick_s"] = time.perf_counter() - t0
        finally:
            connections.close_all()

    def percentiles(waits):
        waits = sorted(waits)
        return {q: round(waits[min(len(waits) - 1, int(q * len(waits)))] * 1000, 1) for q in (0.5, 0.99)}

    idle = []  # the same closes with no tick running: what the machine makes of a close by itself
    for instance_id in instances[-100:]:
        t0 = time.perf_counter()
        stop(instance_id)
        idle.append(time.perf_counter() - t0)
        time.sleep(0.005)
    instances = instances[:-100]
    thread = threading.Thread(target=tick)
    thread.start()
    started.wait()
    time.sleep(0.05)  # the tick has begun its first chunk
    waits = []
    while thread.is_alive() and len(waits) < samples_max:
        t0 = time.perf_counter()
        stop(instances[len(waits)])
        waits.append(time.perf_counter() - t0)
        time.sleep(0.005)
    thread.join()
    during, alone = percentiles(waits or [0]), percentiles(idle)
    return {"closes": len(waits), "close_p50_ms": during[0.5], "close_p99_ms": during[0.99],
            "close_max_ms": round(max(waits or [0]) * 1000, 1), "idle_close_p50_ms": alone[0.5],
            "idle_close_p99_ms": alone[0.99], "tick_s": round(out.get("tick_s", 0), 3), "tick_stats": out.get("stats")}


def run(args) -> dict:
    from billing.verify import ledger_verify

    sizes, results = sorted(args.meters), []
    for n in sizes:
        t0 = time.perf_counter()
        add_meters(n, args.orgs)
        setup_s = time.perf_counter() - t0
        results.append({"meters": n, "orgs": min(n, args.orgs), "setup_s": round(setup_s, 2),
                        **timed_rounds(_now(), args.repeat)})
    during = closes_during_tick() if args.closes else None
    problems = ledger_verify()
    small, large = results[0], results[-1]
    return {"sizes": results, "scale": round(large["tick_s"] / small["tick_s"], 2) if len(results) > 1 else None,
            "size_ratio": large["meters"] / small["meters"], "closes_during_largest_tick": during,
            "ledger_ok": not problems}


def add_meters(n: int, n_orgs: int) -> None:
    """Bring the database to n open meters over min(n, n_orgs) organizations (the first call populates)."""
    from django.db import connection

    from billing.models import Meter

    have = Meter.objects.count()
    if not have:
        populate(n, n_orgs)
        return
    import uuid

    from tenancy.models import Organization

    orgs = list(Organization.objects.filter(slug__startswith="bench-").order_by("slug").values_list("pk", flat=True))
    opened = Meter.objects.values_list("opened_at", flat=True).first()
    Meter.objects.bulk_create(
        [Meter(organization_id=orgs[i % len(orgs)], instance_id=uuid.uuid4(), item_index=0, accelerator="h100",
               cards=1 + i % 8, rate=1_900_000, opened_at=opened) for i in range(have, n)], batch_size=5000)
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")


def _queue_drop(queue) -> None:
    """Delete the bench's task queue from the broker (the stops' dispatches nobody consumes)."""
    if not queue:
        return
    try:
        import redis

        redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")).delete(queue)
    except Exception:  # no broker reachable: nothing was queued there either
        pass


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--meters", type=int, nargs="+", default=[10_000, 100_000],
                        help="open meters, one size after another in the same database (default 10000 100000)")
    parser.add_argument("--orgs", type=int, default=10_000, help="organizations the meters are spread over")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds of each (median reported)")
    parser.add_argument("--no-closes", dest="closes", action="store_false",
                        help="skip the closes timed during a committed tick at the largest size")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", ""),
                        help="PostgreSQL server to use (default: $DATABASE_URL)")
    args = parser.parse_args(argv)
    if not args.database_url.startswith(("postgres://", "postgresql://")):
        parser.error("needs a PostgreSQL DATABASE_URL (or --database-url)")
    name = f"cardmix_bench_metering_{os.getpid()}"
    admin_exec(args.database_url, f'CREATE DATABASE "{name}"')
    try:
        os.environ["DATABASE_URL"] = scratch_url(args.database_url, name)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        os.environ.setdefault("LOG_LEVEL", "WARNING")
        # The stops' outbox messages go to a queue of the bench's own (no worker of anyone else picks them up).
        os.environ["CARDMIX_TASK_QUEUE"] = queue = f"bench-metering-{os.getpid()}"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        result = run(args)
        from django.db import connections

        connections.close_all()
    finally:
        _queue_drop(locals().get("queue"))
        if not args.keep:
            admin_exec(args.database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(json.dumps(result))
    for r in result["sizes"]:
        met = r["ratio"] <= 2
        print(f"tick {r['tick_s'] * 1000:.1f} ms vs baseline {r['baseline_s'] * 1000:.1f} ms for {r['meters']} meters "
              f"over {r['orgs']} organizations: ratio {r['ratio']}x (goal <= 2x: {'MET' if met else 'NOT MET'}); "
              f"per-meter-transfer baseline {r['per_meter_baseline_s'] * 1000:.1f} ms "
              f"({r['ratio_to_per_meter_baseline']}x)",
              file=sys.stderr)
    if result["scale"] is not None:
        goal = 1.1 * result["size_ratio"]
        print(f"tick {result['sizes'][-1]['meters']} / {result['sizes'][0]['meters']} meters: {result['scale']}x "
              f"(goal <= {goal:g}x: {'MET' if result['scale'] <= goal else 'NOT MET'})", file=sys.stderr)
    during = result["closes_during_largest_tick"]
    if during:
        met = during["close_p99_ms"] is not None and during["close_p99_ms"] <= 100
        print(f"{during['closes']} stops during a {during['tick_s']} s tick: p50 {during['close_p50_ms']} ms, "
              f"p99 {during['close_p99_ms']} ms (goal <= 100 ms: {'MET' if met else 'NOT MET'}); with no tick "
              f"running: p50 {during['idle_close_p50_ms']} ms, p99 {during['idle_close_p99_ms']} ms", file=sys.stderr)
    return 0 if result["ledger_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
