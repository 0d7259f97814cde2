"""Fault tests' own servers: a second PostgreSQL cluster and a second redis-server, started and
stopped by the tests, plus web / worker / beat subprocesses whose environment the tests control.

Nothing here touches the suite's shared database or Redis: every process gets DATABASE_URL and
REDIS_URL of these servers, and its own task queue.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
PID = os.getpid()
PG_VERSION = "15"
LOG_DIR = ROOT / "var" / "faults" / str(PID)
WEBHOOK_SECRET = "whsec_faults_test_secret"
# An instance in these states may hold cards (provisioning.services.reconciler.MAY_HOLD).
MAY_HOLD = ("provisioning", "checking", "running", "stopping", "terminating")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(predicate, timeout: float, what: str, interval: float = 0.2):
    """Poll until predicate() is truthy; returns its value or fails the test with `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# --- servers ---------------------------------------------------------------------------------

class PgCluster:
    """A throw-away PostgreSQL 15 cluster (pg_createcluster) with trust auth on loopback."""

    def __init__(self):
        self.name = f"faults_{PID}"
        self.port = free_port()
        self.conf_dir = Path(f"/etc/postgresql/{PG_VERSION}/{self.name}")

    def _ctl(self, action: str, *extra: str) -> None:
        subprocess.run(["pg_ctlcluster", *extra, PG_VERSION, self.name, action], check=True, capture_output=True,
                       timeout=60)

    def create(self) -> None:
        subprocess.run(["pg_createcluster", PG_VERSION, self.name, "-p", str(self.port)], check=True,
                       capture_output=True, timeout=120)
        (self.conf_dir / "pg_hba.conf").write_text(
            "local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n")
        with open(self.conf_dir / "postgresql.conf", "a") as conf:  # a test cluster: speed over durability
            conf.write("\nlisten_addresses = '127.0.0.1'\nfsync = off\nsynchronous_commit = off\n"
                       "full_page_writes = off\nmax_connections = 200\n")
        self.start()
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE cardmix")

    def dsn(self, db: str = "cardmix") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/cardmix"

    def start(self) -> None:
        self._ctl("start")
        wait_until(lambda: answers(self.port), 30, "PostgreSQL to listen")

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")

    def running(self) -> bool:
        return answers(self.port)

    def drop(self) -> None:
        subprocess.run(["pg_dropcluster", "--stop", PG_VERSION, self.name], capture_output=True, timeout=60)


class RedisServer:
    """A redis-server subprocess on a fixed free port, stoppable and restartable (no persistence)."""

    def __init__(self):
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--daemonize", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_until(lambda: answers(self.port), 20, "redis-server to listen")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()  # as a crash would: nothing saved
            self.proc.wait(timeout=10)
        wait_until(lambda: not answers(self.port), 10, "redis-server to go away")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and answers(self.port)

    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


# --- processes -------------------------------------------------------------------------------

class Proc:
    """A subprocess in its own session with its output in a log file."""

    def __init__(self, name: str, cmd: list[str], env: dict):
        self.name, self.cmd, self.env = name, cmd, env
        self.log_path = LOG_DIR / f"{name}-{time.time_ns()}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Proc":
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (main process and pool children), as a crash would."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=20)

    def stop(self) -> None:
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        if getattr(self, "_log", None):
            self._log.close()


class Faults:
    """The fault servers, the environment every process gets, and helpers to drive them."""

    def __init__(self, pg: PgCluster, redis: RedisServer):
        self.pg, self.redis = pg, redis
        self.queue = f"cardmix-faults-{PID}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST") and k != "CARDMIX_FAILPOINT"}
        env.pop("CELERY_TASK_ALWAYS_EAGER", None)
        env.update(
            DATABASE_URL=pg.url(), REDIS_URL=redis.url(), CARDMIX_TASK_QUEUE=self.queue,
            CACHE_KEY_PREFIX=f"cardmix-faults-{PID}", CARDMIX_VAR_DIR=str(LOG_DIR / "var"),
            SIMULATOR_DELAY_SCALE="0", SIMULATOR_FAILURE_SCALE="0", PYTHONUNBUFFERED="1",
            STRIPE_WEBHOOK_SECRET=WEBHOOK_SECRET, OUTBOX_DRAIN_SECONDS="1", RECONCILE_SECONDS="2",
            METER_TICK_SECONDS="3600", DEBUG="0", ALLOWED_HOSTS="*",
            # The faults' organizations come from `issue_token --create-user` (unverified) and rent H100s: the
            # real-name policy is tests/tenancy/test_realname.py's subject, not theirs.
            REALNAME_POLICY="0",
        )
        self.env = env
        self.procs: list[Proc] = []
        self.kept: list[Proc] = []
        self._web: Web | None = None
        self._token: str | None = None

    # -- servers --
    def ensure_up(self) -> None:
        if not self.pg.running():
            self.pg.start()
        if not self.redis.running():
            self.redis.start()

    def flush_queue(self) -> None:
        """Drop what earlier tests' beats left queued, so each test's worker sees only its own tasks."""
        import redis

        redis.Redis.from_url(self.redis.url()).flushall()

    def shared_web(self) -> "Web":
        """One web process for the session (it must survive every server restart anyway)."""
        if self._web is None or not self._web.proc.alive():
            self._web = self.web(keep=True)
        return self._web

    def shared_token(self) -> str:
        """An API token of one verified user (its organization has the trial credit)."""
        if self._token is None:
            self.email = f"faults-{PID}@faults.test"
            self._token = self.token(self.email)
        return self._token

    # -- django commands and SQL --
    def manage(self, *args: str, check: bool = True, extra_env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**self.env, **(extra_env or {})},
                              capture_output=True, text=True, timeout=120, check=check)

    def shell(self, code: str) -> object:
        """Run Python in a Django shell on the fault database; returns the JSON its last line printed."""
        out = self.manage("shell", "-c", code).stdout.strip().splitlines()
        return json.loads(out[-1]) if out else None

    def sql(self, query: str, params=()) -> list[tuple]:
        with psycopg.connect(self.pg.dsn(), autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def state(self, instance_id: str) -> str | None:
        rows = self.sql("SELECT state FROM provisioning_instance WHERE id = %s", (instance_id,))
        return rows[0][0] if rows else None

    def wait_state(self, instance_id: str, states, timeout: float = 60) -> str:
        states = {states} if isinstance(states, str) else set(states)
        return wait_until(lambda: (s := self.state(instance_id)) in states and s, timeout,
                          f"instance {instance_id} to reach {states} (now {self.state(instance_id)})")

    def token(self, email: str) -> str:
        return self.manage("issue_token", "--email", email, "--create-user").stdout.strip().splitlines()[-1]

    # -- processes --
    def spawn(self, name: str, cmd: list[str], extra_env: dict | None = None, keep: bool = False) -> Proc:
        proc = Proc(name, cmd, {**self.env, **(extra_env or {})}).start()
        (self.kept if keep else self.procs).append(proc)
        return proc

    def worker(self, extra_env: dict | None = None, wait: bool = True, concurrency: int = 1) -> Proc:
        env = {"CONN_MAX_AGE": "0", **(extra_env or {})}
        proc = self.spawn("worker", [sys.executable, "-m", "celery", "-A", "config", "worker", "-l", "info",
                                     "-c", str(concurrency), "-Q", self.queue, "-n", f"faults-{time.time_ns()}@%h",
                                     "--without-gossip", "--without-mingle", "--without-heartbeat"], env)
        if wait:
            wait_until(lambda: " ready." in proc.log() or not proc.alive(), 60, "the worker to be ready")
            assert proc.alive(), proc.log()[-3000:]
        return proc

    def beat(self, extra_env: dict | None = None) -> Proc:
        return self.spawn("beat", [sys.executable, "-m", "celery", "-A", "config", "beat", "-l", "info",
                                   "--pidfile=", "-s", str(LOG_DIR / f"beat-{time.time_ns()}")], extra_env)

    def web(self, extra_env: dict | None = None, keep: bool = False) -> "Web":
        port = free_port()
        proc = self.spawn("web", [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload",
                                  "--nothreading"], extra_env, keep=keep)
        web = Web(proc, port)
        wait_until(lambda: web.answers() or not proc.alive(), 60, "the web process to answer")
        assert proc.alive(), proc.log()[-3000:]
        return web

    def send_task(self, name: str, args=()) -> None:
        """Publish a task to the fault queue, as beat would (a Celery client of the fault Redis)."""
        from celery import Celery

        client = Celery("faults-client", broker=self.redis.url())
        client.conf.update(task_serializer="json", broker_connection_retry_on_startup=True)
        try:
            client.send_task(name, args=list(args), queue=self.queue)
        finally:
            client.close()

    def stop_all(self) -> None:
        """Kill what the test started (the next test flushes the queue, so nothing half-done carries over)."""
        for proc in reversed(self.procs):
            proc.kill()
            proc.stop()
        self.procs.clear()

    # -- invariants --
    def leaked_cards(self) -> list[tuple]:
        """Live card allocations of instances that may not hold cards (or do not exist)."""
        return self.sql(
            "SELECT a.holder_id, i.state FROM inventory_cardallocation a LEFT JOIN provisioning_instance i "
            "ON i.id = a.holder_id WHERE a.released_at IS NULL AND a.holder_kind = 'instance' "
            "AND (i.id IS NULL OR i.state <> ALL(%s))", (list(MAY_HOLD),))

    def meter_drift(self) -> list[tuple]:
        """Meters whose posted + written-off amount is not floor(rate × cards × S / 3600), or whose postings (the
        per-meter detail, billing_metercharge: a tick's transfers are per organization and source) do not sum to
        what the meter says it posted. verify_ledger checks the transfers against the detail."""
        return self.sql(
            "SELECT m.id, m.posted_amount, m.written_off_amount, m.posted_through_seconds, "
            "COALESCE((SELECT sum(c.amount) FROM billing_metercharge c WHERE c.meter_id = m.id), 0) AS charged "
            "FROM billing_meter m WHERE m.posted_amount + m.written_off_amount "
            "<> (m.rate * m.cards * m.posted_through_seconds) / 3600 "
            "OR m.posted_amount <> COALESCE((SELECT sum(c.amount) FROM billing_metercharge c "
            "WHERE c.meter_id = m.id), 0)")

    def verify_ledger(self) -> str:
        result = self.manage("verify_ledger", check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout


class Web:
    """A web process and a requests session pointed at it."""

    def __init__(self, proc: Proc, port: int):
        self.proc, self.port = proc, port
        self.base = f"http://127.0.0.1:{port}"

    def answers(self) -> bool:
        try:
            requests.get(f"{self.base}/healthz", timeout=2)
            return True
        except requests.RequestException:
            return False

    def request(self, method: str, path: str, token: str | None = None, **kwargs) -> requests.Response:
        headers = kwargs.pop("headers", {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return requests.request(method, f"{self.base}{path}", headers=headers, timeout=kwargs.pop("timeout", 30),
                                **kwargs)


def container_body(name: str = "faults", accelerator: str = "h100-sxm-80g", count: int = 1) -> dict:
    return {"name": name, "kind": "container", "items": [{"accelerator": accelerator, "count": count}],
            "image": "pytorch-2.3-cuda12.3"}


# --- fixtures --------------------------------------------------------------------------------

def _have_servers() -> str | None:
    for tool in ("pg_createcluster", "pg_ctlcluster", "pg_dropcluster", "redis-server"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    if os.geteuid() != 0:
        return "pg_createcluster needs root"
    return None


@pytest.fixture(scope="session")
def fault_servers(request):
    """The fault PostgreSQL cluster and redis-server, migrated and seeded once per session.

    Process logs stay under var/faults/<pid>/ when a test failed (removed after a clean run)."""
    why = _have_servers()
    if why:
        pytest.skip(f"[faults] {why}")
    pg, redis = PgCluster(), RedisServer()
    try:
        pg.create()
        redis.start()
        faults = Faults(pg, redis)
        faults.manage("migrate", "--noinput")
        faults.manage("seed_demo_fleet")
        yield faults
    finally:
        try:
            if "faults" in locals():
                faults.stop_all()
                for proc in faults.kept:
                    proc.stop()
        finally:
            if redis.proc and redis.proc.poll() is None:
                redis.proc.kill()
                redis.proc.wait(timeout=10)
            pg.drop()
            if request.session.testsfailed == 0:
                shutil.rmtree(LOG_DIR, ignore_errors=True)


@pytest.fixture
def faults(fault_servers):
    """The fault servers (up at the start of each test) and every process a test starts, stopped after it."""
    fault_servers.ensure_up()
    fault_servers.flush_queue()
    yield fault_servers
    fault_servers.stop_all()
    fault_servers.ensure_up()
