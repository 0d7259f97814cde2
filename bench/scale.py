"""Scale: the scale goals' figures (SPEC §13) at 10k nodes and 100k running instances, measured in one run as
a deployment runs.

Creates a scratch PostgreSQL database next to DATABASE_URL's (dropped at the end unless --keep), migrates it and
builds, in bulk (`INSERT … SELECT`, no per-row round trips): --orgs funded organizations with --instances open
meters (bench.metering.populate), --nodes nodes of 16 cards over 4 zones and 4 accelerator types, and one
running one-card instance per meter holding a card (card allocation and node group included), spread so every
node holds about the same share. Then, in this order:

1. placement: `placement_decide` at that size (the process's kept index, its one read of the change log), timed
   inside an open transaction, each decision claimed and an older claim released (committed) so every decision
   has fresh changes to read; wall and CPU percentiles;
2. the meter tick against bench.metering's raw SQL baseline at that size (bench.metering.timed_rounds, each
   round rolled back), before the deployment runs so no beat tick holds the tick's lock meanwhile;
3. the deployment: two `celery worker -c 1` processes, `celery beat` (the project's schedule, every periodic
   job with its advisory lock, the meter tick every --tick-seconds) and two web processes
   (`uvicorn config.asgi:application --workers 2`), all against the scratch database and a queue of their own;
4. `GET /api/v1/instances/?limit=100` against `GET /api/v1/ping/`, with wrk (bench.api_load's runner),
   interleaved rounds, while the periodic jobs run;
5. stops through the API (`POST /api/v1/instances/<id>/stop/`), one after another, until a tick run by the beat
   has begun and ended while they went on; each stop is filed under "during a tick" when the tick's advisory
   lock was held both before and after it, else under "no tick".

The processes are stopped, the queue emptied and the database dropped at the end, whatever happened.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/cardmix REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python -m bench.scale               # 10k nodes, 100k instances, 10k organizations
    .venv/bin/python -m bench.scale --quick           # 1k nodes, 10k instances (make bench)
"""
from __future__ import annotations

import argparse
import bisect
import collections
import http.client
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
CARDS = 16  # per node: 10k nodes hold 100k one-card instances at ~62 % of their cards
ZONES = 4
ACCELERATORS = 4
RATE = 1_900_000  # µCNY per card-hour, bench.metering's meters
SIZES = {
    "full": {"nodes": 10_000, "instances": 100_000, "orgs": 10_000, "decisions": 2_000, "tick_seconds": 60,
             "stops_during": 200},
    "quick": {"nodes": 1_000, "instances": 10_000, "orgs": 1_000, "decisions": 500, "tick_seconds": 15,
              "stops_during": 50},
    "tiny": {"nodes": 40, "instances": 400, "orgs": 40, "decisions": 50, "tick_seconds": 4,
             "stops_during": 1},
}
# The scale goals (SPEC §13).
GOAL_PLACEMENT_P99_MS = 2.0
GOAL_TICK_RATIO = 2.0
GOAL_STOP_P99_MS = 100.0
GOAL_LIST_RATIO = 0.5


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)


# --- the database ------------------------------------------------------------------------------------------

def _insert_select(model, exprs: dict[str, str], source: str, params: list) -> int:
    """INSERT INTO model's table SELECT … FROM source: `exprs` gives columns by SQL expression; every other
    column takes the field's Python default (Django writes defaults, the tables have none), or NULL."""
    from django.db import connection
    from django.db.models import AutoField, BigAutoField

    cols, values, args = [], [], []
    for f in model._meta.concrete_fields:
        if f.column in exprs:
            cols.append(f.column)
            values.append(exprs[f.column])
        elif f.has_default() or (not f.null and f.empty_strings_allowed and not f.is_relation):
            cols.append(f.column)
            values.append("%s")
            args.append(f.get_db_prep_save(f.get_default(), connection))
        elif f.null or isinstance(f, AutoField | BigAutoField):
            continue
        else:
            raise RuntimeError(f"bench.scale does not know what to write in {model.__name__}.{f.name}")
    with connection.cursor() as cur:
        cur.execute(f"INSERT INTO {model._meta.db_table} ({', '.join(cols)}) SELECT {', '.join(values)} FROM {source}",
                    args + params)
        return cur.rowcount


def build(nodes: int, instances: int, orgs: int) -> dict:
    """The fleet, the organizations, the running instances with their cards, meters and node groups."""
    from django.db import connection

    from bench.metering import populate
    from inventory.models import CardAllocation, Zone
    from provisioning.models import Instance, NodeGroup
    from provisioning.services.capacity import placement_catalog

    timings = {}
    t0 = time.perf_counter()
    populate(instances, orgs)  # organizations, funded accounts, one open meter per future instance
    timings["organizations_meters_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    zones = [Zone.objects.get_or_create(slug=f"scale-z{i}", defaults={"name": f"scale z{i}"})[0].pk
             for i in range(ZONES)]
    accs = sorted(placement_catalog())[:ACCELERATORS]
    # The placement change log's row triggers would log every inserted card and allocation, only for the log to be
    # emptied at the end: off during the build (a deployment's workers read the built fleet once, cold).
    triggers = [("inventory_node", "placement_change_node"), ("inventory_card", "placement_change_card"),
                ("inventory_cardallocation", "placement_change_allocation")]
    with connection.cursor() as cur:
        for table, trigger in triggers:
            cur.execute(f"ALTER TABLE {table} DISABLE TRIGGER {trigger}")
        cur.execute("SELECT id FROM inventory_accelerator WHERE slug = ANY(%s) ORDER BY slug", [accs])
        acc_ids = [r[0] for r in cur.fetchall()]
        cur.execute("""
            INSERT INTO inventory_node (id, hostname, zone_id, accelerator_id, card_count, state, state_reason,
                state_changed_at, driver, ssh_host, ssh_port, bmc_address, bmc_credentials_ref, created_at)
            SELECT gen_random_uuid(), 'scale-' || lpad(i::text, 6, '0'), (%s::uuid[])[1 + i %% %s],
                   (%s::uuid[])[1 + (i / %s) %% %s], %s, 'available', '', now(), 'simulated', '', 22, '', '', now()
            FROM generate_series(0, %s - 1) AS i""",
                    [zones, ZONES, acc_ids, ZONES, len(acc_ids), CARDS, nodes])
        cur.execute("INSERT INTO inventory_card (node_id, index, health) "
                    "SELECT n.id, c, 'ok' FROM inventory_node n, generate_series(0, %s - 1) AS c", [CARDS])
        # Meter k gets card k in (index, node) order: every node holds about the same number of instances.
        cur.execute("""
            CREATE TEMP TABLE scale_slot AS
            SELECT m.id AS meter_id, m.instance_id, m.organization_id, c.card_id, c.node_id, c.index,
                   n.zone_id, a.slug AS accelerator
              FROM (SELECT id, instance_id, organization_id, row_number() OVER (ORDER BY id) AS rn
                      FROM billing_meter) m
              JOIN (SELECT c.id AS card_id, c.node_id, c.index,
                           row_number() OVER (ORDER BY c.index, n.hostname) AS rn
                      FROM inventory_card c JOIN inventory_node n ON n.id = c.node_id) c ON c.rn = m.rn
              JOIN inventory_node n ON n.id = c.node_id
              JOIN inventory_accelerator a ON a.id = n.accelerator_id""")
        cur.execute("SELECT count(*) FROM scale_slot")
        placed = cur.fetchone()[0]
        if placed < instances:
            raise SystemExit(f"{instances} instances need {instances} cards; {nodes} nodes have {nodes * CARDS}")
        cur.execute("UPDATE billing_meter m SET accelerator = s.accelerator, cards = 1 FROM scale_slot s "
                    "WHERE m.id = s.meter_id")
    ran = "statement_timestamp() - interval '2 hours'"
    _insert_select(Instance, {
        "id": "s.instance_id", "organization_id": "s.organization_id", "name": "'scale-' || s.meter_id",
        "kind": "'container'", "items": "json_build_array(json_build_object('accelerator', s.accelerator, "
                                        f"'count', 1, 'rate', {RATE}))::jsonb",
        "image": "'pytorch-2.3-cuda12.3'", "images": "'{\"nvidia\": \"pytorch-2.3-cuda12.3\"}'::jsonb",
        "zone_id": "s.zone_id", "state": "'running'", "price_per_hour": str(RATE), "ready_at": ran,
        "sla_deadline": ran, "created_at": ran, "updated_at": ran,
    }, "scale_slot s", [])
    _insert_select(CardAllocation, {"card_id": "s.card_id", "holder_kind": "'instance'",
                                    "holder_id": "s.instance_id", "allocated_at": ran}, "scale_slot s", [])
    _insert_select(NodeGroup, {
        "instance_id": "s.instance_id", "item_index": "0", "accelerator": "s.accelerator", "node_id": "s.node_id",
        "card_indices": "jsonb_build_array(s.index)", "card_ids": "jsonb_build_array(s.card_id)",
        "state": "'checked'", "prepared_at": ran, "checked_at": ran, "created_at": ran,
    }, "scale_slot s", [])
    with connection.cursor() as cur:
        for table, trigger in triggers:
            cur.execute(f"ALTER TABLE {table} ENABLE TRIGGER {trigger}")
        cur.execute("DROP TABLE scale_slot")
        # The build's change rows are history a running deployment would have pruned long ago.
        cur.execute("TRUNCATE inventory_placementchange")
        cur.execute("VACUUM ANALYZE")
    timings["fleet_instances_s"] = round(time.perf_counter() - t0, 1)
    return {**timings, "accelerators": accs}


def tokens_for(orgs: int) -> list[tuple[str, list[str]]]:
    """(API token, its organization's running instance ids) for the first `orgs` organizations, one owner."""
    from bench.api_load import _token_for
    from provisioning.models import Instance
    from tenancy.models import Membership, Organization, User

    user = User.objects.create_user(email="scale@example.com", password="bench-password-123", name="scale")
    out = []
    for org in Organization.objects.filter(slug__startswith="bench-").order_by("slug")[:orgs]:
        Membership.objects.create(organization=org, user=user, role="owner")
        ids = [str(i) for i in Instance.objects.filter(organization=org, state="running").values_list("pk", flat=True)]
        out.append((_token_for(org.pk, user), ids))
    return out


# --- 1. placement ------------------------------------------------------------------------------------------

def placement(decisions: int, accs: list[str], rng: random.Random) -> dict:
    """Time placement_decide over churn: each decision claimed by a fresh holder, the oldest of them released."""
    from django.db import connection, transaction

    from bench.placement_db import SIZES as REQUEST_SIZES
    from inventory.models import Card
    from inventory.services import CardsUnavailable, cards_allocate, cards_release
    from provisioning.placement import CONTAINER, Item, PlacementRequest
    from provisioning.services import placement_index
    from provisioning.services.capacity import placement_catalog
    from provisioning.services.claims import placement_decide

    catalog = placement_catalog()
    held: collections.deque = collections.deque()
    placement_index.placement_index_drop()  # a fresh worker: its first decision reads the whole fleet

    def one() -> tuple[float, float]:
        request = PlacementRequest(CONTAINER, (Item(rng.choice(accs), rng.choice(REQUEST_SIZES)),))
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")  # the create's transaction is open when it places
            c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
            result = placement_decide(request, catalog)
            wall, cpu = (time.perf_counter_ns() - w0) / 1e6, (time.thread_time_ns() - c0) / 1e6
        if result.ok:
            ids = [Card.objects.get(node_id=a.node_id, index=i).pk for a in result.assignments for i in a.card_indices]
            holder = uuid.UUID(int=rng.getrandbits(128))
            try:
                cards_allocate(card_ids=ids, holder_id=holder)
                held.append(holder)
            except CardsUnavailable:
                pass
        while len(held) > 50:
            cards_release(holder_id=held.popleft())
        return wall, cpu

    cold_ms = one()[0]
    for _ in range(min(200, decisions)):
        one()
    loads = [_load()]
    wall, cpu = [], []
    for _ in range(decisions):
        w, c = one()
        wall.append(w)
        cpu.append(c)
    loads.append(_load())
    while held:
        cards_release(holder_id=held.popleft())
    return {"decisions": decisions, "cold_build_ms": round(cold_ms, 1),
            "wall_median_ms": _pct(wall, 0.5), "wall_p99_ms": _pct(wall, 0.99),
            "cpu_median_ms": _pct(cpu, 0.5), "cpu_p99_ms": _pct(cpu, 0.99), "load_average": loads}


# --- 3. the deployment -------------------------------------------------------------------------------------

class Deployment:
    """Two Celery workers, beat and two web processes against the scratch database, each in its own session."""

    def __init__(self, env: dict, var: Path):
        self.env, self.var = env, var
        self.procs: list[tuple[str, subprocess.Popen, Path]] = []
        with __import__("socket").socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]

    def _spawn(self, name: str, cmd: list[str], **env) -> subprocess.Popen:
        log = self.var / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, env={**self.env, **env}, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.procs.append((name, proc, log))
        return proc

    def start(self, timeout: float = 120) -> None:
        from bench.api_load import _wait_http

        py = sys.executable
        queue = self.env["CARDMIX_TASK_QUEUE"]
        for n in (1, 2):
            self._spawn(f"worker{n}", [py, "-m", "celery", "-A", "config", "worker", "-l", "info", "-c", "1",
                                       "-Q", queue, "-n", f"scale{n}-{os.getpid()}@%h", "--without-gossip",
                                       "--without-mingle"], LOG_LEVEL="INFO")  # its "ready." line
        self._spawn("beat", [py, "-m", "celery", "-A", "config", "beat", "-l", "info",
                             "-s", str(self.var / "beat-schedule")])
        web = self._spawn("web", [py, "-m", "uvicorn", "config.asgi:application", "--workers", "2", "--host",
                                  "127.0.0.1", "--port", str(self.port), "--lifespan", "off", "--no-access-log"])
        _wait_http(f"{self.origin}/healthz", web, timeout)
        deadline = time.time() + timeout
        for name, proc, log in self.procs:
            if name.startswith("worker"):
                while b"ready." not in log.read_bytes():
                    if proc.poll() is not None or time.time() > deadline:
                        raise RuntimeError(f"{name} did not start: {self.tail(name)}")
                    time.sleep(0.3)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tail(self, name: str, n: int = 2000) -> str:
        for proc_name, _proc, log in self.procs:
            if proc_name == name:
                return log.read_text(errors="replace")[-n:]
        return ""

    def alive(self) -> list[str]:
        return [name for name, proc, _ in self.procs if proc.poll() is None]

    def stop(self) -> None:
        for _name, proc, _log in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _name, proc, _log in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


# --- 4. the list against ping ------------------------------------------------------------------------------

def list_vs_ping(origin: str, token: str, duration: str, rounds: int) -> dict:
    from bench.api_load import WRK_DIR, _wrk

    wrk_args = argparse.Namespace(wrk=shutil.which("wrk") or "/usr/bin/wrk", threads=2, connections=20,
                                  duration=duration, timeout="30s")
    env = {"TOKEN": token, "SUMMARY_LUA": str(WRK_DIR / "summary.lua")}
    per_round, pings, lists = [], [], []
    for _ in range(rounds):
        ping = _wrk(wrk_args, f"{origin}/api/v1/ping/", "get_auth.lua", env)
        listed = _wrk(wrk_args, f"{origin}/api/v1/instances/?limit=100", "get_auth.lua", env)
        pings.append(ping)
        lists.append(listed)
        per_round.append(round(listed["rps"] / ping["rps"], 3) if ping["rps"] else None)
    measured = [r for r in per_round if r is not None]
    errors = sum(r["non2xx"] + r["socket_errors"] for r in pings + lists)
    return {"ping_rps": round(statistics.median(r["rps"] for r in pings), 1),
            "list_rps": round(statistics.median(r["rps"] for r in lists), 1),
            "ping_p99_ms": round(statistics.median(r["p99_us"] for r in pings) / 1000, 2),
            "list_p99_ms": round(statistics.median(r["p99_us"] for r in lists) / 1000, 2),
            "ratio_per_round": per_round, "ratio": statistics.median(measured) if measured else None,
            "errors": errors, "load_average": _load()}


# --- 5. stops during a tick --------------------------------------------------------------------------------

class TickWatch:
    """Samples, every 10 ms from its own connection, whether the meter tick's advisory lock is held."""

    def __init__(self):
        import threading

        from django.db import connection

        from core.locks import _lock_id

        self.db, self.key = connection.settings_dict, _lock_id("billing.meter_tick")
        self.samples: list[tuple[float, bool]] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psycopg

        db = self.db
        with psycopg.connect(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"],
                             dbname=db["NAME"], autocommit=True) as conn:
            while not self.done.is_set():
                held = conn.execute(
                    "SELECT EXISTS(SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 AND objid = %s "
                    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))",
                    [self.key]).fetchone()[0]
                self.samples.append((time.perf_counter(), held))
                time.sleep(0.01)

    def held_at(self, t: float) -> bool:
        """Whether the last sample at or before t saw the tick running."""
        samples = list(self.samples)
        i = bisect.bisect_right(samples, (t, True))
        return samples[i - 1][1] if i else False

    def ticks(self) -> list[float]:
        """Durations (s) of the ticks seen from start to end."""
        out, began, prev = [], None, None
        for when, held in list(self.samples):
            if held and not prev and prev is not None:
                began = when
            elif not held and prev and began is not None:
                out.append(round(when - began, 2))
                began = None
            prev = held
        return out


def stops_during_tick(origin: str, tokens: list[tuple[str, list[str]]], timeout: float, pause: float,
                      want: int) -> dict:
    """Stop instances through the API, one after another, until `want` stops were issued while a beat-run tick
    ran and that tick has ended (or `timeout`); a stop counts as issued during a tick when the tick's lock was
    held at the last sample before the request went out."""
    work = [(token, i) for token, ids in tokens for i in ids]
    random.Random(26).shuffle(work)
    parts = urlsplit(origin)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    sent: list[tuple[float, float]] = []  # (issued at, took ms)
    statuses: collections.Counter = collections.Counter()
    refusals: list[str] = []  # the first few non-202 bodies: why (the web log says more)
    loads = [_load()]
    watch = TickWatch()
    watch.thread.start()
    deadline = time.time() + timeout
    try:
        for token, instance_id in work:
            t0 = time.perf_counter()
            conn.request("POST", f"/api/v1/instances/{instance_id}/stop/", body=b"{}",
                         headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
            response = conn.getresponse()
            body = response.read()
            sent.append((t0, (time.perf_counter() - t0) * 1000))
            statuses[response.status] += 1
            if response.status != 202 and len(refusals) < 5:
                refusals.append(body.decode(errors="replace")[:300])
            if len(sent) % 50 == 0:
                loads.append(_load())
                during = sum(1 for t, _ in sent if watch.held_at(t))
                if during >= want and watch.ticks() or time.time() > deadline:
                    break
            time.sleep(pause)
    finally:
        conn.close()
        watch.done.set()
        watch.thread.join(timeout=5)
    during = [ms for t, ms in sent if watch.held_at(t)]
    idle = [ms for t, ms in sent if not watch.held_at(t)]
    loads.append(_load())
    return {"stops": len(sent), "statuses": dict(statuses), "refusals": refusals, "ticks_seen_s": watch.ticks(),
            "during_tick": len(during), "during_p50_ms": _pct(during, 0.5), "during_p99_ms": _pct(during, 0.99),
            "during_max_ms": _pct(during, 1.0), "no_tick": len(idle), "no_tick_p50_ms": _pct(idle, 0.5),
            "no_tick_p99_ms": _pct(idle, 0.99), "load_average": [min(loads), max(loads)]}


# --- the run -----------------------------------------------------------------------------------------------

def run(args, base: str, name: str) -> dict:
    import django

    from bench.metering import scratch_url, timed_rounds

    var = Path(tempfile.mkdtemp(prefix="cardmix-bench-scale-"))
    queue = f"cardmix-scale-{os.getpid()}"
    env = {"DATABASE_URL": scratch_url(base, name), "DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "false",
           "CARDMIX_VAR_DIR": str(var), "CONN_MAX_AGE": "60", "CARDMIX_TASK_QUEUE": queue,
           "CACHE_KEY_PREFIX": f"cardmix-scale-{os.getpid()}", "THROTTLE_TOKEN": "100000000/min",
           "METER_TICK_SECONDS": str(args.tick_seconds), "SIMULATOR_DELAY_SCALE": "0",
           "SIMULATOR_FAILURE_SCALE": "0", "LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1"}
    os.environ.update(env)
    os.environ.pop("CELERY_TASK_ALWAYS_EAGER", None)
    django.setup()
    from django.core.management import call_command
    from django.db import connections

    out: dict = {"database": name, "nodes": args.nodes, "instances": args.instances, "orgs": args.orgs, "cards_per_node": CARDS}
    deployment = None
    try:
        t0 = time.perf_counter()
        call_command("migrate", verbosity=0)
        out["migrate_s"] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        out["build"] = build(args.nodes, args.instances, args.orgs)
        tokens = tokens_for(args.stop_orgs)
        out["build_s"] = round(time.perf_counter() - t0, 1)
        print(f"built {args.nodes} nodes, {args.instances} running instances, {args.orgs} organizations in "
              f"{out['build_s']} s (migrations {out['migrate_s']} s)", file=sys.stderr, flush=True)

        out["placement"] = placement(args.decisions, out["build"]["accelerators"], random.Random(26))
        print(f"placement: {json.dumps(out['placement'])}", file=sys.stderr, flush=True)
        load0 = _load()
        from core.dbclock import db_now

        tick = timed_rounds(db_now(), args.tick_repeat)
        out["tick"] = {k: tick[k] for k in ("tick_s", "baseline_s", "ratio", "tick_runs", "baseline_runs")}
        out["tick"]["load_average"] = [load0, _load()]
        print(f"tick: {json.dumps(out['tick'])}", file=sys.stderr, flush=True)
        connections.close_all()

        deployment = Deployment({**os.environ, **env}, var)
        t0 = time.perf_counter()
        deployment.start()
        out["deployment_start_s"] = round(time.perf_counter() - t0, 1)
        out["api"] = list_vs_ping(deployment.origin, tokens[0][0], args.duration, args.rounds)
        print(f"api: {json.dumps(out['api'])}", file=sys.stderr, flush=True)
        out["stops"] = stops_during_tick(deployment.origin, tokens, args.stop_timeout, args.stop_pause,
                                         args.stops_during)
        print(f"stops: {json.dumps(out['stops'])}", file=sys.stderr, flush=True)
        if out["stops"]["refusals"]:  # what the web processes logged about them (service unavailable: its cause)
            errors = [line for line in deployment.tail("web", 200_000).splitlines()
                      if "Error" in line or "error" in line]
            out["web_errors"] = errors[-20:]
            print("web errors:\n" + "\n".join(out["web_errors"]), file=sys.stderr, flush=True)
        out["processes_alive_at_end"] = deployment.alive()
        out["beat_log_tail"] = deployment.tail("beat", 600) if len(out["processes_alive_at_end"]) < 4 else ""
    finally:
        if deployment is not None:
            deployment.stop()
        connections.close_all()
        _queue_drop(queue)
        shutil.rmtree(var, ignore_errors=True)
    return out


def _queue_drop(queue: str) -> None:
    """Delete what the beat queued that no worker took (the queue is this run's own)."""
    url = os.environ.get("REDIS_URL", "")
    if url.startswith("redis"):
        import redis

        client = redis.Redis.from_url(url)
        client.delete(queue, f"{queue}\x06\x163", f"{queue}\x06\x166", f"{queue}\x06\x169")


def verdicts(out: dict) -> list[str]:
    def met(ok: bool | None) -> str:
        return "MET" if ok else "NOT MET"

    p, t, a, s = out["placement"], out["tick"], out["api"], out["stops"]
    lines = [
        f"placement_decide at {out['nodes']} nodes / {out['instances']} instances: wall p50 {p['wall_median_ms']} ms, "
        f"p99 {p['wall_p99_ms']} ms (CPU p99 {p['cpu_p99_ms']} ms; load {p['load_average']}) — goal p99 ≤ "
        f"{GOAL_PLACEMENT_P99_MS} ms: {met(p['wall_p99_ms'] <= GOAL_PLACEMENT_P99_MS)}",
        f"meter tick {t['tick_s']} s vs raw baseline {t['baseline_s']} s at {out['instances']} meters: {t['ratio']}× "
        f"— goal ≤ {GOAL_TICK_RATIO}×: {met(t['ratio'] <= GOAL_TICK_RATIO)}",
        f"GET /api/v1/instances/?limit=100 {a['list_rps']} req/s vs ping {a['ping_rps']} req/s: {a['ratio']} "
        f"(per round {a['ratio_per_round']}) — goal ≥ {GOAL_LIST_RATIO}: "
        f"{met(a['ratio'] is not None and a['ratio'] >= GOAL_LIST_RATIO)}",
        f"stops during a beat-run tick ({s['ticks_seen_s']} s): {s['during_tick']} stops, p50 {s['during_p50_ms']} ms, "
        f"p99 {s['during_p99_ms']} ms; with no tick: {s['no_tick']} stops, p99 {s['no_tick_p99_ms']} ms — goal "
        f"p99 ≤ {GOAL_STOP_P99_MS} ms: "
        f"{met(s['during_p99_ms'] is not None and s['during_p99_ms'] <= GOAL_STOP_P99_MS)}"
        + ("" if s["ticks_seen_s"] else " (no tick seen before the stop timeout)"),
    ]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_const", dest="size", const="quick", help="1k nodes, 10k instances")
    size.add_argument("--tiny", action="store_const", dest="size", const="tiny", help="40 nodes (tests)")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--instances", type=int)
    parser.add_argument("--orgs", type=int)
    parser.add_argument("--decisions", type=int, help="timed placement decisions")
    parser.add_argument("--tick-seconds", type=int, help="the beat's meter tick period in the deployment")
    parser.add_argument("--tick-repeat", type=int, default=1, help="rolled-back tick/baseline rounds")
    parser.add_argument("--duration", default="5s", help="wrk -d per target and round")
    parser.add_argument("--rounds", type=int, default=3, help="ping/list rounds")
    parser.add_argument("--stop-orgs", type=int, default=300, help="organizations whose instances are stopped")
    parser.add_argument("--stop-pause", type=float, default=0.02, help="seconds between stops")
    parser.add_argument("--stop-timeout", type=float, default=600, help="give up waiting for a tick after this")
    parser.add_argument("--stops-during", type=int, help="stops issued during a tick to collect")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", ""))
    args = parser.parse_args(argv)
    preset = SIZES[args.size or "full"]
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not args.database_url.startswith(("postgres://", "postgresql://")):
        parser.error("needs a PostgreSQL DATABASE_URL (or --database-url)")
    if not os.environ.get("REDIS_URL"):
        parser.error("needs REDIS_URL: the deployment's workers and beat share a Redis broker")
    from bench.metering import admin_exec

    name = f"cardmix_bench_scale_{os.getpid()}"
    admin_exec(args.database_url, f'CREATE DATABASE "{name}"')
    started = time.perf_counter()
    try:
        out = run(args, args.database_url, name)
    finally:
        if not args.keep:
            admin_exec(args.database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    out["total_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out), flush=True)
    for line in verdicts(out):
        print(line, file=sys.stderr)
    return 0 if out["api"]["errors"] == 0 and set(out["stops"]["statuses"]) <= {202} else 1


if __name__ == "__main__":
    sys.exit(main())
