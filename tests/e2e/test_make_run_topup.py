"""`make run` on embedded defaults, in headless Chromium: the demo user tops up 50 CNY end to end.

The platform starts the way `make run` starts it (dbserver start, migrate, seed_demo, runall) in a temporary var
dir — its own embedded PostgreSQL there — and on a free port, with none of the test run's PostgreSQL, Redis or
Stripe settings: runall starts localstripe as the
Stripe stand-in, the page's PaymentIntent is confirmed through localstripe's Stripe.js stand-in, and localstripe's
webhook credits cash.
"""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.conftest import Shots, chromium_launched

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]
DROPPED = ("DATABASE_URL", "REDIS_URL", "STRIPE_", "CARDMIX_", "SITE_URL", "CACHE_KEY_PREFIX", "DJANGO_ALLOW_ASYNC")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def make_run(tmp_path):
    """The platform as `make run` brings it up; yields (base URL, runall's log path, its SSH gateway's port)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED)}
    env["CARDMIX_VAR_DIR"] = str(tmp_path / "var")
    py = sys.executable
    for step in (["dbserver", "start"], ["migrate", "--noinput"], ["seed_demo"]):
        done = subprocess.run([py, "manage.py", *step], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    port = _free_port()
    gateway_port = _free_port()
    env["SSH_GATEWAY_PORT"] = str(gateway_port)  # runall's gateway child, off any port another run holds
    log_path = tmp_path / "runall.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen([py, "manage.py", "runall", "--addr", f"127.0.0.1:{port}"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        try:
            urllib.request.urlopen(f"{url}/login/", timeout=2).read()
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                raise AssertionError(f"runall did not serve: {log_path.read_text(errors='replace')[-3000:]}") from None
            time.sleep(0.5)
    try:
        yield url, log_path, gateway_port
    finally:
        os.kill(proc.pid, signal.SIGTERM)  # runall stops web, worker, beat, localstripe and the database itself
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
        # Stopped already unless runall died first; either way no server outlives the test.
        subprocess.run([py, "manage.py", "dbserver", "stop"], cwd=ROOT, env=env, capture_output=True, timeout=60)


def _ssh_banner(port: int, timeout: float = 30.0) -> bytes:
    """What runall's SSH gateway child says first (it may still be starting when the web answers)."""
    deadline = time.time() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                return s.recv(64)
        except OSError:
            if time.time() > deadline:
                return b""
            time.sleep(0.3)


def _log_lines(log_path: Path) -> str:
    """What the platform and localstripe logged about the payment (for a failure's message)."""
    words = ("webhook", "stripe", "topup", "payment", "error", "warning", "traceback")
    text = log_path.read_text(errors="replace") + (log_path.parent / "var" / "localstripe.log").read_text(
        errors="replace")
    return "\n".join(line[:400] for line in text.splitlines() if any(w in line.lower() for w in words))[-6000:]


def test_the_demo_user_tops_up_50_cny_on_make_run_defaults(make_run, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # chromium_launched closes Django's connections at the end
    url, log_path, gateway_port = make_run
    assert "Payments: test mode at localstripe" in log_path.read_text(errors="replace")
    assert _ssh_banner(gateway_port).startswith(b"SSH-2.0-"), log_path.read_text(errors="replace")[-3000:]
    for chromium in chromium_launched():
        page = chromium.new_context(viewport={"width": 1280, "height": 900}).new_page()
        shot = Shots(page, "make-run-topup")
        page.goto(f"{url}/login/")
        page.fill("input[name=username]", "demo@cardmix.local")
        page.fill("input[name=password]", "cardmix-demo-2026")
        page.click("button[type=submit]")
        page.wait_for_url("**/dashboard/")
        page.goto(f"{url}/billing/topup/")
        assert page.inner_text("#balance-now") == "¥0.00"
        assert "Test mode" in page.inner_text("#topup-test-mode")
        page.wait_for_selector("#card-element input[placeholder=number]")  # the stand-in's card field
        assert page.is_enabled("button[data-method=card]")
        page.fill("#topup-amount", "50.00")
        page.fill("#card-element input[placeholder=number]", "4242424242424242")
        shot("form")
        page.click("button[data-method=card]")
        page.click("button:text-is('Complete authentication')", timeout=30_000)  # the stand-in's 3-D Secure prompt
        try:
            page.wait_for_selector("#topup-status[data-state=succeeded]", timeout=60_000)
        except Exception as exc:
            raise AssertionError(f"no credit: {_log_lines(log_path)}") from exc
        assert page.inner_text("#cash-balance") == "¥50.00"
        assert page.inner_text("#balance-now") == "¥50.00"  # the page's balance card follows
        shot("credited")
        page.goto(f"{url}/billing/topup/")
        assert page.inner_text("#balance-now") == "¥50.00"
        assert "succeeded" in page.inner_text("table")
