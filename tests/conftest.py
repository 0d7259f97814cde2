"""Test infrastructure: service detection, marker enforcement, per-run database and queue names,
API clients, and a real Celery worker running as a separate OS process."""
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hyp_settings

ROOT = Path(__file__).resolve().parent.parent
RUN_ID = os.getpid()
MARKED = ("redis", "worker", "browser", "slurm", "compose", "gettext")

hyp_settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
hyp_settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
hyp_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

if os.environ.get("CELERY_TASK_ALWAYS_EAGER", "").lower() in ("1", "true", "yes"):
    # Integration tests must prove tasks run in a worker process, never inline.
    raise pytest.UsageError("CELERY_TASK_ALWAYS_EAGER is set: the integration suite refuses to run eagerly.")


def _answers(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=1):
            return True
    except OSError:
        return False


def _available() -> dict[str, str | None]:
    """Why each marker's requirement is missing (None when it is met)."""
    from django.conf import settings

    why: dict[str, str | None] = {}
    redis_url = settings.REDIS_URL
    why["redis"] = None if redis_url and _answers(redis_url, 6379) else "Redis not reachable (REDIS_URL)"
    why["worker"] = why["redis"]
    chromium = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).exists()), None)
    why["browser"] = None if chromium else "Debian chromium not installed"
    why["slurm"] = None if Path("/usr/sbin/slurmctld").exists() else "slurmctld not installed"
    why["compose"] = None if shutil.which("docker-compose") else "docker-compose not installed"
    why["gettext"] = None if shutil.which("xgettext") and shutil.which("msgmerge") else "GNU gettext not installed"
    return why


_skipped_marked: list[str] = []


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks added here
def pytest_collection_modifyitems(config, items):
    why = _available()
    for item in items:
        for mark in MARKED:
            if item.get_closest_marker(mark) and why[mark]:
                item.add_marker(pytest.mark.skip(reason=f"[{mark}] {why[mark]}"))
                break
        if item.get_closest_marker("faults"):
            # Under pytest-xdist (--dist loadgroup) the fault tests share one worker, one at a time.
            item.add_marker(pytest.mark.xdist_group("faults"))
    # Fault tests start and stop servers: run them last.
    items.sort(key=lambda it: 1 if it.get_closest_marker("faults") else 0)


def pytest_runtest_logreport(report):
    # A GPU test skipped on a host without one is expected (CI has none), not a missing service.
    if report.skipped and "gpu" not in report.keywords and any(m in report.keywords for m in MARKED):
        _skipped_marked.append(report.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _skipped_marked:
        tr = terminalreporter
        tr.section("SKIPPED FOR LACK OF SERVICES", sep="!", red=True, bold=True)
        for nodeid in _skipped_marked:
            tr.write_line(f"SKIPPED: {nodeid}", red=True)
        tr.write_line(f"{len(_skipped_marked)} tests needing Redis/worker/browser/slurm/compose/gettext did not run.", red=True)


def pytest_sessionfinish(session, exitstatus):
    if _skipped_marked and os.environ.get("CARDMIX_REQUIRE_MARKED") == "1":
        session.exitstatus = 1


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """A test database of this run's own, so concurrent runs on one server never collide."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    db.setdefault("TEST", {})["NAME"] = f"test_{db['NAME']}_{RUN_ID}"


@pytest.fixture(scope="session", autouse=True)
def _translations_compiled():
    """i18n: the .mo files are build output (gitignored): compile the committed .po files, as `make run` does."""
    from core.management.commands.compile_translations import compile_catalogs

    compile_catalogs()


@pytest.fixture(scope="session", autouse=True)
def _fast_password_hasher():
    """PBKDF2 at full cost makes every login seconds long; tests do not need it."""
    from django.test.utils import override_settings

    override = override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"])
    override.enable()
    yield
    override.disable()


@pytest.fixture(autouse=True)
def _placement_state_fresh():
    """The learned placement demand (cached a minute) and the kept placement index live per process: each test
    starts from its own rows, so no placement order depends on which tests ran before in this worker."""
    from provisioning.services.demand import demand_forget
    from provisioning.services.placement_index import placement_index_drop

    demand_forget()
    placement_index_drop()
    yield


@pytest.fixture(autouse=True)
def _language_reset():
    """A request in Chinese leaves its language active in this thread (the locale middleware activates it and
    nothing deactivates it): the next test would read services' messages in Chinese."""
    from django.utils import translation

    yield
    translation.deactivate()


@pytest.fixture(scope="session", autouse=True)
def _task_queue():
    """This run's own Celery queue: workers of other runs never take our tasks."""
    from config.celery import app

    queue = f"cardmix-test-{RUN_ID}"
    app.conf.task_default_queue = queue
    yield queue


# --- API clients ------------------------------------------------------------------------------

@pytest.fixture
def api_client():
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def operator_client(db):
    """The Django test client logged in as a superuser (the admin); `.user` is that operator."""
    from django.test import Client

    from tests.factories.tenancy import UserFactory

    client = Client()
    client.user = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(client.user)
    return client


@pytest.fixture
def member_factory(db):
    """make(role=..., org=None) → a Membership (user + organization)."""
    from tests.factories.tenancy import MembershipFactory

    def make(role="owner", org=None, **kwargs):
        if org is not None:
            kwargs["organization"] = org
        return MembershipFactory(role=role, **kwargs)

    return make


@pytest.fixture
def session_client_for(db):
    """client_for(membership) → an APIClient logged in by session with that organization current."""
    from rest_framework.test import APIClient

    from tests.factories.tenancy import login_client

    def make(membership):
        return login_client(membership, APIClient)

    return make


# --- A real Celery worker process ------------------------------------------------------------

def _worker_env(queue: str) -> dict:
    from django.db import connection

    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        DATABASE_URL=url,
        CARDMIX_TASK_QUEUE=queue,
        CONN_MAX_AGE="0",
        SIMULATOR_DELAY_SCALE=os.environ.get("SIMULATOR_DELAY_SCALE", "0"),
        PYTHONUNBUFFERED="1",
    )
    env.pop("CELERY_TASK_ALWAYS_EAGER", None)
    return env


class LoggedProcess:
    """A test's child process writing to `log_path`; its tail goes into the test's failure message."""

    log_path: Path

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop_group(self) -> None:
        """End the process's group (TERM, then KILL after 20 s) and close its log."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(timeout=10)
        self._log.close()


class WorkerProcess(LoggedProcess):
    """A `celery worker` OS process against this run's test database and queue."""

    def __init__(self, queue: str, extra_env: dict | None = None, log_path: Path | None = None):
        self.queue = queue
        self.env = {**_worker_env(queue), **(extra_env or {})}
        self.log_path = log_path or ROOT / "var" / f"worker-{RUN_ID}-{time.time_ns()}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, wait: bool = True) -> "WorkerProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        cmd = [sys.executable, "-m", "celery", "-A", "config", "worker", "-l", "info", "-c", "1",
               "-Q", self.queue, "-n", f"test-{RUN_ID}-{time.time_ns()}@%h", "--without-gossip",
               "--without-mingle", "--without-heartbeat"]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        if wait:
            try:
                self.wait_ready()
            except BaseException:
                self.stop()  # never leave an orphan eating this run's queue
                raise
        return self

    def wait_ready(self, timeout: float = 60) -> int:
        """Send a heartbeat task and wait until this process has run it; returns the task's pid."""
        from core.models import WorkerHeartbeat
        from core.tasks import worker_heartbeat

        deadline = time.time() + timeout
        seen = set(WorkerHeartbeat.objects.values_list("pk", "seen_at"))
        next_send = 0.0
        while time.time() < deadline:
            # Re-send now and then: a message taken by a worker that a previous test killed is
            # only redelivered after the visibility timeout.
            if time.time() >= next_send:
                worker_heartbeat.apply_async(queue=self.queue)
                next_send = time.time() + 3
            fresh = [hb for hb in WorkerHeartbeat.objects.all() if (hb.pk, hb.seen_at) not in seen]
            if fresh:
                return fresh[0].pid
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}; log: {self.log_tail()}")
            time.sleep(0.2)
        raise TimeoutError(f"worker not ready; log: {self.log_tail()}")


    def kill(self, sig: int = 9) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(timeout=10)
        if getattr(self, "_log", None):
            self._log.close()


@pytest.fixture
def celery_worker_process(transactional_db, _task_queue):
    """A real worker process for one test (the test's data is committed, so the worker sees it)."""
    worker = WorkerProcess(_task_queue).start()
    yield worker
    worker.stop()


@pytest.fixture
def start_worker(transactional_db, _task_queue):
    """start(extra_env=...) → a WorkerProcess; every one started is stopped at the end."""
    started: list[WorkerProcess] = []

    def start(extra_env: dict | None = None, wait: bool = True) -> WorkerProcess:
        worker = WorkerProcess(_task_queue, extra_env).start(wait=wait)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


# --- tenancy: API clients authenticated by bearer token --------------------------------------------

@pytest.fixture
def token_client_for(db):
    """client_for(membership, scope="write") → an APIClient sending `Authorization: Bearer cmx_…`.

    The client's `.token` is the ApiToken row and `.secret` the bearer secret.
    """
    from rest_framework.test import APIClient

    from tests.factories.tenancy import make_token

    def make(membership, scope="write"):
        token, secret = make_token(membership, scope=scope)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        client.token, client.secret = token, secret
        return client

    return make


# --- inventory: the SPEC §1 catalog (added by the inventory issue) ---------------------------

@pytest.fixture
def catalog(db):
    """{slug: Accelerator} of the seeded catalog; re-seeds it if a transactional test flushed it."""
    from inventory.catalog_seed import seed_catalog
    from inventory.models import Accelerator

    seed_catalog()
    return {a.slug: a for a in Accelerator.objects.all()}


# --- The ASGI app (uvicorn) for WebSocket tests: the port proxy and the web terminal --------------------

class AsgiServer(LoggedProcess):
    """`uvicorn config.asgi:application` on a free loopback port against this run's test database."""

    def __init__(self, extra_env: dict | None = None):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**_worker_env("unused"), **(extra_env or {})}
        self.log_path = ROOT / "var" / f"asgi-{RUN_ID}-{time.time_ns()}.log"

    def start(self) -> "AsgiServer":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
             "--port", str(self.port), "--lifespan", "off", "--no-access-log"],
            cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"uvicorn exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"uvicorn did not listen: {self.log_tail()}")


    def stop(self) -> None:
        self.stop_group()


@pytest.fixture
def asgi_server(transactional_db):
    """The whole app served by uvicorn (HTTP and WebSockets), stopped at the end of the test."""
    server = AsgiServer().start()
    yield server
    server.stop()
