"""API load: requests/s and p50/p99 of the busiest endpoints, as ratios to a trivial authenticated DRF call.

Creates its own scratch PostgreSQL database (`cardmix_bench_api` next to DATABASE_URL's, or on
postgres://postgres@127.0.0.1:5432), migrates it, seeds a fleet of 1,000 nodes and two organizations,
one with 1,000 instances and one with 10 (rows written directly: node groups, card allocations, events; a
tenth waitlisted, a tenth monthly with an active package, the rest with an open meter ticks have posted
for, their transfers and balances), API tokens and a console session, then VACUUM ANALYZEs it (statistics as
autovacuum keeps them); starts `uvicorn config.asgi:application --workers 4` as production does (`--server
gunicorn`: config.wsgi) on a free loopback port; warms every target for 2 s, unrecorded; drives each target
with wrk at 20 connections;
prints requests/s, p50 and p99 and their ratio to the baseline `GET /api/v1/ping/` measured in the
same run, and per round each target's ratio to that round's ping, judged against GOALS (the One-engine issue:
the instance list ≥ 0.3 of the ping with p99 ≤ 4× the ping's, ≥ 0.5 for a 10-instance organization; the
catalog ≥ 0.5, a quote ≥ 0.4, the console's instance list ≥ 0.2); then stops the web server and drops the
database.

    .venv/bin/python -m bench.api_load                # -t2 -c20 -d10s per target, 3 interleaved rounds
    .venv/bin/python -m bench.api_load --duration 30s --json var/bench-api.json
    .venv/bin/python -m bench.api_load --duration 5s --lists-only  # ping and the instance lists only
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
WRK_DIR = ROOT / "bench" / "wrk"
NODES = 1000
INSTANCES = 1000  # the large organization; the small one has SMALL_INSTANCES
SMALL_INSTANCES = 10
# Each target's goal: (least requests/s as a share of the ping's, most p99 as a multiple of the ping's; None: no
# bound), judged on the median of the per-round ratios. No target may meet it with stored or cached bodies.
GOALS = {
    "GET /api/v1/instances/?limit=100": (0.3, 4.0),
    f"GET /api/v1/instances/?limit=100 ({SMALL_INSTANCES}-instance organization)": (0.5, 4.0),
    "GET /api/v1/instances/?limit=100&cursor=": (0.3, 4.0),
    "GET /api/v1/accelerators/": (0.5, None),
    "POST /api/v1/quotes/": (0.4, None),
    "GET /instances/ (console, session)": (0.2, None),
}
CARDS_PER_NODE = 8
QUOTE_BODY = {"name": "bench", "kind": "container", "items": [{"accelerator": "h100-sxm-80g", "count": 2}],
              "image": "pytorch-2.3-cuda12.3"}


def _urls(base: str, name: str) -> tuple[str, str]:
    """(scratch database URL, maintenance database URL) on the server `base` names."""
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=f"/{name}")), urlunsplit(parts._replace(path="/postgres"))


def _admin(maintenance_url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(maintenance_url, autocommit=True) as conn:
        conn.execute(sql)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _seed() -> dict:
    """The fleet, a large and a small organization with their instances, tokens and a session."""
    from django.conf import settings
    from django.db import transaction
    from django.test import Client

    from inventory.catalog_seed import seed_catalog
    from inventory.models import Accelerator, Card, Node, Zone
    from tenancy.middleware import SESSION_ORG_KEY

    seed_catalog()
    with transaction.atomic():
        accs = list(Accelerator.objects.filter(orderable=True).order_by("slug"))
        h100 = Accelerator.objects.get(slug="h100-sxm-80g")
        zones = [Zone.objects.get_or_create(slug=f"bench-{z}", defaults={"name": f"Bench {z}"})[0] for z in "ab"]
        # Half the fleet H100 (the instances live there), the rest spread over the catalog.
        nodes = Node.objects.bulk_create([
            Node(hostname=f"bench-{i:04d}.test", zone=zones[i % 2], ssh_host=f"bench-{i:04d}.test",
                 accelerator=h100 if i < NODES // 2 else accs[i % len(accs)], card_count=CARDS_PER_NODE)
            for i in range(NODES)])
        Card.objects.bulk_create([Card(node=n, index=i) for n in nodes for i in range(CARDS_PER_NODE)])
        cards = {(c.node_id, c.index): c.pk for c in Card.objects.filter(node__in=nodes)}
        large, user = _seed_org("bench", INSTANCES, nodes, cards, first_slot=0)
        small, _ = _seed_org("bench-small", SMALL_INSTANCES, nodes, cards, first_slot=INSTANCES)

    client = Client()
    client.force_login(user)
    session = client.session
    session[SESSION_ORG_KEY] = str(large)
    session.save()
    cookie = f"{settings.SESSION_COOKIE_NAME}={session.session_key}"
    return {"token": _token_for(large, user), "small_token": small, "cookie": cookie}


def _token_for(org_id, user) -> str:
    from tenancy.models import ApiToken
    from tenancy.token_secrets import token_display_prefix, token_generate, token_hash

    secret = token_generate()
    ApiToken.objects.create(organization_id=org_id, user=user, name="bench", scope="write",
                            prefix=token_display_prefix(secret), token_hash=token_hash(secret))
    return secret


def _seed_org(slug: str, n: int, nodes, cards, *, first_slot: int):
    """One organization with n instances as production has them: running ones (a tenth monthly, with an active
    package) with an open meter that ticks have posted for half an hour, and a tenth waitlisted. Returns
    (organization id, or the small organization's token, the owner)."""
    from datetime import timedelta

    from django.db.models import F

    from billing.ledger import org_account_ids, platform_id
    from billing.models import Account, Meter, MeterCharge, Package, Transfer
    from core.dbclock import db_now
    from inventory.models import CardAllocation
    from provisioning.models import Instance, InstanceEvent, NodeGroup
    from tenancy.models import Membership, Organization, User

    user = User.objects.create_user(email=f"{slug}@example.com", password="bench-password-123", name=slug)
    org = Organization.objects.create(name=slug, slug=slug, card_quota=100_000)
    Membership.objects.create(organization=org, user=user, role="owner")
    cash = org_account_ids([org.pk])[org.pk]["cash"]
    now, rate = db_now(), 1_900_000
    waiting = {i for i in range(n) if i % 10 == 9}
    monthly = {i for i in range(n) if i % 10 == 4}
    instances = Instance.objects.bulk_create([
        Instance(organization=org, creator=user, name=f"{slug}-{i:04d}", kind="container",
                 items=[{"accelerator": "h100-sxm-80g", "count": 2, "rate": rate}],
                 image="pytorch-2.3-cuda12.3", images={"nvidia": "pytorch-2.3-cuda12.3"},
                 billing="monthly" if i in monthly else "on_demand",
                 **({"state": "waitlisted", "waitlist": True, "waitlisted_at": now - timedelta(minutes=n - i)}
                    if i in waiting else {"state": "running", "ready_at": now, "sla_deadline": now}),
                 price_per_hour=2 * rate)
        for i in range(n)])
    groups, allocations, events, meters, packages = [], [], [], [], []
    for i, inst in enumerate(instances):
        if i in waiting:
            events.append(InstanceEvent(instance=inst, from_state="", to_state="waitlisted", reason="bench seed",
                                        created_at=now))
            continue
        slot = first_slot + i
        node = nodes[slot // 4]  # 4 instances × 2 cards fill one 8-card H100 node
        indices = [2 * (slot % 4), 2 * (slot % 4) + 1]
        ids = [cards[(node.pk, j)] for j in indices]
        groups.append(NodeGroup(instance=inst, item_index=0, accelerator="h100-sxm-80g", node=node,
                                card_indices=indices, card_ids=ids, state="checked", prepared_at=now,
                                checked_at=now))
        allocations += [CardAllocation(card_id=c, holder_id=inst.pk) for c in ids]
        events += [InstanceEvent(instance=inst, from_state=a, to_state=b, reason="bench seed", created_at=now)
                   for a, b in (("", "pending"), ("pending", "provisioning"), ("provisioning", "checking"),
                                ("checking", "running"))]
        if i in monthly:
            packages.append(Package(organization=org, instance_id=inst.pk, items=inst.items, rate_per_hour=2 * rate,
                                    amount=720 * 2 * rate, starts_at=now - timedelta(days=1),
                                    ends_at=now + timedelta(days=29)))
        else:
            meters.append(Meter(organization=org, instance_id=inst.pk, item_index=0, accelerator="h100-sxm-80g",
                                cards=2, rate=rate, opened_at=now - timedelta(hours=1), posted_through_seconds=1800,
                                posted_amount=2 * rate // 2))
    NodeGroup.objects.bulk_create(groups)
    CardAllocation.objects.bulk_create(allocations)
    InstanceEvent.objects.bulk_create(events)
    Package.objects.bulk_create(packages)
    meters = Meter.objects.bulk_create(meters)
    revenue = platform_id("compute_revenue")
    # As a tick posts them: one transfer for the organization's cash into the tick's revenue, the detail per meter.
    charges = [Transfer(key=f"tick:{meters[0].pk}:1800:cash", debit_account_id=cash,
                        credit_account_id=platform_id("tick_revenue"), amount=sum(m.posted_amount for m in meters),
                        code="meter")] if meters else []
    MeterCharge.objects.bulk_create([MeterCharge(meter_id=m.pk, through_seconds=1800, amount=m.posted_amount,
                                                 created_at=now) for m in meters])
    charges += [Transfer(key=f"package:{p.pk}:cash", debit_account_id=cash, credit_account_id=revenue,
                         amount=p.amount, code="package", instance_id=p.instance_id) for p in packages]
    funding = 10 ** 13
    Transfer.objects.bulk_create([Transfer(key=f"bench-fund:{org.pk}", debit_account_id=platform_id("payments_clearing"),
                                           credit_account_id=cash, amount=funding, code="topup"), *charges])
    spent = sum(t.amount for t in charges)
    Account.objects.filter(pk=cash).update(balance=funding - spent)
    for t in charges:
        Account.objects.filter(pk=t.credit_account_id).update(balance=F("balance") + t.amount)
    Account.objects.filter(pk=platform_id("payments_clearing")).update(balance=F("balance") - funding)
    if slug == "bench":
        return org.pk, user
    return _token_for(org.pk, user), user


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def _check(url: str, headers: dict, body: bytes | None = None) -> int:
    """One request before the load, so a 4xx/5xx target fails loudly instead of benchmarking an error page."""
    req = urllib.request.Request(url, data=body, headers=headers, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{url} answered {exc.code}: {exc.read()[:300]!r}") from None


def _wrk(args, url: str, script: str, env: dict) -> dict:
    cmd = [args.wrk, f"-t{args.threads}", f"-c{args.connections}", f"-d{args.duration}", "--latency",
           "--timeout", args.timeout,
           "-s", str(WRK_DIR / script), url]
    out = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, check=True).stdout
    match = re.search(r"^BENCH (\{.*\})$", out, re.M)
    if not match:
        raise RuntimeError(f"no summary from wrk:\n{out}")
    return json.loads(match.group(1))


def _median(runs: list[dict]) -> dict:
    """Per-field median over the rounds (counts summed)."""
    out = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    for k in ("requests", "non2xx", "socket_errors"):
        out[k] = sum(r[k] for r in runs)
    return out


def _table(results: list[tuple[str, dict]]) -> str:
    base = results[0][1]
    lines = [f"{'target':44} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'rps/base':>9} {'p99/base':>9} {'non2xx':>7} {'errors':>7}"]
    for name, r in results:
        lines.append(f"{name:44} {r['rps']:8.1f} {r['p50_us'] / 1000:8.2f} {r['p99_us'] / 1000:8.2f} "
                     f"{r['rps'] / base['rps']:9.3f} {r['p99_us'] / base['p99_us']:9.2f} {r['non2xx']:7d} "
                     f"{r['socket_errors']:7d}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--threads", type=int, default=2, help="wrk -t (default 2)")
    parser.add_argument("--connections", type=int, default=20, help="wrk -c (default 20)")
    parser.add_argument("--duration", default="10s", help="wrk -d per target (default 10s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over all targets; medians reported (default 3)")
    parser.add_argument("--timeout", default="30s", help="wrk --timeout: slower answers count as errors (default 30s)")
    parser.add_argument("--workers", type=int, default=4, help="web processes (default 4)")
    parser.add_argument("--server", choices=["uvicorn", "gunicorn"], default="uvicorn",
                        help="uvicorn on config.asgi as production runs it (default), or gunicorn on config.wsgi")
    parser.add_argument("--db-name", default="cardmix_bench_api", help="scratch database (dropped at the end)")
    parser.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    parser.add_argument("--json", help="also write the results as JSON to this path")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--lists-only", action="store_true",
                        help="only the baseline and the instance lists (offset and cursor pages)")
    args = parser.parse_args()

    base = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    if not base.startswith(("postgres://", "postgresql://")):
        print("bench.api_load needs PostgreSQL (DATABASE_URL=postgres://…)", file=sys.stderr)
        return 2
    db_url, maintenance = _urls(base, args.db_name)
    _admin(maintenance, f'DROP DATABASE IF EXISTS "{args.db_name}" WITH (FORCE)')
    _admin(maintenance, f'CREATE DATABASE "{args.db_name}"')
    var = Path(tempfile.mkdtemp(prefix="cardmix-bench-api-"))
    # Everything below (migrate, seed, gunicorn) talks to the scratch database only.
    env = {"DATABASE_URL": db_url, "DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "false",
           "CARDMIX_VAR_DIR": str(var), "CONN_MAX_AGE": "60",
           # The per-token throttle (6000/min) would turn the bench into a 429 bench.
           "THROTTLE_TOKEN": "100000000/min", "CACHE_KEY_PREFIX": f"cardmix-bench-{os.getpid()}"}
    os.environ.update(env)
    gunicorn = None
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connections

        t0 = time.time()
        call_command("migrate", verbosity=0, interactive=False)
        seeded = _seed()
        with connections["default"].cursor() as cur:
            # Statistics and visibility as production's autovacuum keeps them (this machine's PostgreSQL may run
            # without): the list's prepared statements are planned once per connection, from these statistics.
            cur.execute("VACUUM ANALYZE")
        connections.close_all()
        print(f"scratch database {args.db_name}: migrated and seeded {NODES} nodes, {INSTANCES} + {SMALL_INSTANCES} instances "
              f"in {time.time() - t0:.1f}s", flush=True)

        port = _free_port()
        # What production serves with (Dockerfile, docker-compose.yml: uvicorn on config.asgi), or --server gunicorn
        # (the WSGI app, as this bench ran before 2026-12-03).
        server = ([sys.executable, "-m", "uvicorn", "config.asgi:application", "--workers", str(args.workers),
                   "--host", "127.0.0.1", "--port", str(port), "--lifespan", "off", "--no-access-log",
                   "--log-level", "warning"] if args.server == "uvicorn" else
                  [str(ROOT / ".venv" / "bin" / "gunicorn"), "config.wsgi", "-w", str(args.workers), "-b",
                   f"127.0.0.1:{port}", "--log-level", "warning", "--access-logfile", "/dev/null"])
        gunicorn = subprocess.Popen(server, cwd=ROOT, env={**os.environ, "LOG_LEVEL": "WARNING"},
                                    start_new_session=True)
        origin = f"http://127.0.0.1:{port}"
        _wait_http(f"{origin}/healthz", gunicorn)

        body_file = var / "quote.json"
        body_file.write_text(json.dumps(QUOTE_BODY))
        auth = {"TOKEN": seeded["token"], "SUMMARY_LUA": str(WRK_DIR / "summary.lua")}
        bearer = {"Authorization": f"Bearer {seeded['token']}"}
        targets = [
            ("GET /api/v1/ping/ (baseline)", "/api/v1/ping/", "get_auth.lua", auth, None),
            ("GET /api/v1/instances/?limit=100", "/api/v1/instances/?limit=100", "get_auth.lua", auth, None),
            (f"GET /api/v1/instances/?limit=100 ({SMALL_INSTANCES}-instance organization)",
             "/api/v1/instances/?limit=100", "get_auth.lua", {**auth, "TOKEN": seeded["small_token"]}, None),
            ("GET /api/v1/accelerators/", "/api/v1/accelerators/", "get_auth.lua", auth, None),
            ("POST /api/v1/quotes/", "/api/v1/quotes/", "post_json.lua",
             {**auth, "BODY_FILE": str(body_file)}, json.dumps(QUOTE_BODY).encode()),
            ("GET /instances/ (console, session)", "/instances/", "get_auth.lua",
             {"TOKEN": "", "COOKIE": seeded["cookie"], "SUMMARY_LUA": str(WRK_DIR / "summary.lua")}, None),
            ("GET /api/v1/instances/?limit=100&cursor=", "/api/v1/instances/?limit=100&cursor=", "get_auth.lua", auth,
             None),
        ]
        if args.lists_only:
            targets = [t for t in targets if "/instances/?" in t[1] or "ping" in t[1]]
        for _name, path, _script, wrk_env, body in targets:
            headers = ({"Cookie": seeded["cookie"]} if "COOKIE" in wrk_env else
                       {**bearer, "Content-Type": "application/json"})
            _check(origin + path, headers, body)
        # Unrecorded: every web process and database connection warmed on every target first, as a running
        # deployment's are (a process compiles and prepares each statement once; the first round paid for it).
        for _name, path, script, wrk_env, _body in targets:
            _wrk(argparse.Namespace(**{**vars(args), "duration": "2s"}), origin + path, script, wrk_env)
        # Targets take turns, round after round, so a change in the machine's load hits all of them alike.
        rounds: dict[str, list[dict]] = {name: [] for name, *_ in targets}
        for n in range(args.rounds):
            for name, path, script, wrk_env, _body in targets:
                result = _wrk(args, origin + path, script, wrk_env)
                rounds[name].append(result)
                print(f"  round {n + 1} {name}: {result['rps']:.1f} req/s, p50 {result['p50_us'] / 1000:.2f} ms, "
                      f"p99 {result['p99_us'] / 1000:.2f} ms", flush=True)
        results = [(name, _median(rounds[name])) for name, *_ in targets]

        print(f"\nwrk -t{args.threads} -c{args.connections} -d{args.duration} × {args.rounds} rounds (medians), "
              f"{args.server} x {args.workers}, {NODES} nodes, {INSTANCES} instances")
        print(_table(results))
        # Per round: each target against the ping of the same round (the load moves both alike).
        # A round whose ping answered nothing in the whole window (an overloaded machine) has no ratio.
        base_rounds = rounds[targets[0][0]]
        per_round = {name: [round(rounds[name][n]["rps"] / base_rounds[n]["rps"], 3) if base_rounds[n]["rps"] else None
                            for n in range(args.rounds)] for name, *_ in targets if name in GOALS}
        ok = True
        print()
        for name, ratios in per_round.items():
            least, most_p99 = GOALS[name]
            p99_ratio = _median(rounds[name])["p99_us"] / (results[0][1]["p99_us"] or 1)
            measured = [r for r in ratios if r is not None]
            median = statistics.median(measured) if measured else float("nan")
            met = bool(measured) and median >= least and (most_p99 is None or p99_ratio <= most_p99)
            ok = ok and met
            p99_goal = f" and p99 ≤ {most_p99:g}× baseline ({p99_ratio:.2f})" if most_p99 is not None else ""
            print(f"goal: {name} ≥ {least} of baseline req/s (per round {ratios}, median {median:.3f}){p99_goal}: "
                  f"{'MET' if met else 'NOT MET'}")
        if args.json:
            Path(args.json).write_text(json.dumps({
                "args": {k: v for k, v in vars(args).items() if k != "json"}, "goal_met": ok, "per_round": per_round,
                "results": [{"target": n, **r} for n, r in results], "rounds": rounds}, indent=2))
        return 0 if all(r["non2xx"] == 0 and r["socket_errors"] == 0 for _, r in results) else 1
    finally:
        if gunicorn is not None and gunicorn.poll() is None:
            os.killpg(gunicorn.pid, signal.SIGTERM)
            try:
                gunicorn.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(gunicorn.pid, signal.SIGKILL)
                gunicorn.wait(timeout=10)
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # noqa: BLE001 — teardown goes on even when Django never loaded
            pass
        if not args.keep:
            _admin(maintenance, f'DROP DATABASE IF EXISTS "{args.db_name}" WITH (FORCE)')
        shutil.rmtree(var, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
