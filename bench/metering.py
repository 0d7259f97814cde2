"""Metering benchmark: one bulk tick over N open meters vs a hand-written SQL baseline, same run.

Creates its own scratch PostgreSQL database next to DATABASE_URL's (dropped at the end unless
--keep), migrates it, creates N funded organizations with one open meter each (opened 60 s ago),
then times, each inside a transaction that is rolled back so every round starts equal:

- tick:     billing.tick.meter_tick (lock meters, lock accounts, split over trial → … → cash,
            insert transfers, move balances, advance meters) — without the funds watch;
- baseline: one `INSERT … SELECT` of the same transfers from the meters, plus `UPDATE … FROM`
            of the customer balances and one UPDATE of compute_revenue.

Prints both medians and the ratio (target: tick within 3× of the baseline).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/cardmix python -m bench.metering --meters 10000
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

BASELINE_INSERT = """
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
BASELINE_UPDATE = """
UPDATE billing_account a SET balance = a.balance - d.amount
FROM (SELECT t.debit_account_id AS id, sum(t.amount) AS amount FROM billing_transfer t
      WHERE t.code = 'meter' GROUP BY t.debit_account_id) d
WHERE a.id = d.id
"""
REVENUE_UPDATE = """
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


def populate(n: int) -> None:
    """N organizations, their accounts funded through payments_clearing, one open meter each."""
    import uuid

    from django.db import connection

    from billing.ledger import org_account_ids, platform_accounts_ensure
    from billing.models import BillingProfile, Meter
    from tenancy.models import Organization

    platform_accounts_ensure()
    orgs = Organization.objects.bulk_create(
        [Organization(name=f"Bench {i}", slug=f"bench-{i}") for i in range(n)], batch_size=2000)
    ids = org_account_ids([o.pk for o in orgs])
    BillingProfile.objects.bulk_create([BillingProfile(organization_id=o.pk) for o in orgs], ignore_conflicts=True)
    funding = 100_000_000
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO billing_transfer (key, debit_account_id, credit_account_id, amount, code, meter_id, "
            "instance_id, payment_ref, grant_ref, created_at) SELECT 'bench-fund:' || id, -1, id, %s, 'topup', "
            "NULL, NULL, '', '', now() FROM unnest(%s::bigint[]) AS id",
            [funding, [ids[o.pk]["cash"] for o in orgs]])
        cur.execute("UPDATE billing_account SET balance = %s WHERE kind = 'cash' AND organization_id IS NOT NULL",
                    [funding])
        cur.execute("UPDATE billing_account SET balance = -%s WHERE id = -1", [funding * n])
    Meter.objects.bulk_create(
        [Meter(organization_id=o.pk, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1 + i % 8,
               rate=1_900_000, opened_at=_now()) for i, o in enumerate(orgs)], batch_size=2000)
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


def run(args) -> dict:
    from django.db import connection

    from billing.tick import meter_tick
    from billing.verify import ledger_verify

    t0 = time.perf_counter()
    if not args.reuse:
        populate(args.meters)
    setup_s = time.perf_counter() - t0
    now = _now()

    def tick():
        return meter_tick(now=now, watch=False)

    def baseline():
        with connection.cursor() as cur:
            cur.execute(BASELINE_INSERT, {"now": now})
            inserted = cur.rowcount
            cur.execute(BASELINE_UPDATE)
            cur.execute(REVENUE_UPDATE)
        return inserted

    ticks, bases, stats, inserted = [], [], None, None
    for _ in range(args.repeat):
        elapsed, inserted = timed_rolled_back(baseline)
        bases.append(elapsed)
        elapsed, stats = timed_rolled_back(tick)
        ticks.append(elapsed)
    # one committed tick (rolled back when reusing a database), then the ledger must still verify
    problems = timed_rolled_back(lambda: (meter_tick(now=now, watch=False), ledger_verify())[1])[1] \
        if args.reuse else (meter_tick(now=now, watch=False), ledger_verify())[1]
    tick_s, base_s = statistics.median(ticks), statistics.median(bases)
    return {"meters": args.meters, "setup_s": round(setup_s, 2), "tick_s": round(tick_s, 4),
            "baseline_s": round(base_s, 4), "ratio": round(tick_s / base_s, 2), "tick_runs": [round(x, 4) for x in ticks],
            "baseline_runs": [round(x, 4) for x in bases], "tick_stats": stats, "baseline_rows": inserted,
            "ledger_ok": not problems}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--meters", type=int, default=10_000, help="open meters (one organization each)")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds of each (median reported)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--reuse", metavar="NAME", help="reuse a kept scratch database (already migrated and "
                        "populated; rolled-back rounds only)")
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", ""),
                        help="PostgreSQL server to use (default: $DATABASE_URL)")
    args = parser.parse_args(argv)
    if not args.database_url.startswith(("postgres://", "postgresql://")):
        parser.error("needs a PostgreSQL DATABASE_URL (or --database-url)")
    name = args.reuse or f"cardmix_bench_metering_{os.getpid()}"
    if not args.reuse:
        admin_exec(args.database_url, f'CREATE DATABASE "{name}"')
    try:
        os.environ["DATABASE_URL"] = scratch_url(args.database_url, name)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        os.environ.setdefault("LOG_LEVEL", "WARNING")
        import django

        django.setup()
        from django.core.management import call_command

        if not args.reuse:
            call_command("migrate", verbosity=0)
        result = run(args)
        from django.db import connections

        connections.close_all()
    finally:
        if not args.keep and not args.reuse:
            admin_exec(args.database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(json.dumps(result))
    print(f"tick {result['tick_s'] * 1000:.1f} ms vs baseline {result['baseline_s'] * 1000:.1f} ms "
          f"for {result['meters']} meters: ratio {result['ratio']}x (target <= 3x)", file=sys.stderr)
    return 0 if result["ledger_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
