"""Browser tests: headless Debian Chromium (nothing downloaded), a live server, screenshots per step."""
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from tests.factories.tenancy import session_key_for

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
WORKER_ENV = {"SIMULATOR_DELAY_SCALE": "0.5", "SIMULATOR_FAILURE_SCALE": "0"}


@pytest.fixture
def e2e_env(settings, monkeypatch, catalog):
    """Live-server settings: in-process caches (throttles), no random faults, the ledger's platform rows."""
    from billing.ledger import platform_accounts_ensure

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # the ORM is used between browser steps
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    settings.SIMULATOR_FAILURE_SCALE = 0
    settings.SIMULATOR_DELAY_SCALE = 0
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    platform_accounts_ensure()  # a transactional test's flush removed the migration's rows
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return settings


def chromium_launched():
    """Headless Debian Chromium for a fixture to yield from (the e2e `browser`, the console's `chromium`)."""
    from django.db import connections
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
            # Playwright's event loop gets its own Django connection: close it, or dropping the test database waits.
            connections.close_all()


@pytest.fixture
def browser():
    yield from chromium_launched()


def session_cookie(membership, live_server) -> dict:
    """A logged-in session for the membership's user with its organization current."""
    return {"name": django_settings.SESSION_COOKIE_NAME, "value": session_key_for(membership), "url": live_server.url}


class Shots:
    """Numbered screenshots of one test under test-artifacts/console/."""

    def __init__(self, page, name):
        self.page, self.name, self.n = page, name, 0

    def __call__(self, step: str):
        self.n += 1
        self.page.screenshot(path=str(ARTIFACTS / f"{self.name}-{self.n:02d}-{step}.png"), full_page=True)


def ready_worker(start_worker, attempts: int = 3):
    """Start a worker and wait for its heartbeat, re-sending it if one was lost (seen flaky on a busy Redis)."""
    worker = start_worker(extra_env=WORKER_ENV, wait=False)
    for attempt in range(attempts):
        try:
            worker.wait_ready(timeout=20)
            return worker
        except TimeoutError:
            if attempt == attempts - 1:
                raise
    return worker
