"""Run web, Celery worker, Celery beat and the SSH gateway together in the foreground; Ctrl-C stops them all.

Without DATABASE_URL they share the embedded PostgreSQL in var/postgres/ (core/embedded_postgres.py): started
first if `make run` has not, stopped last.

The web process is uvicorn serving config.asgi: the Django app over HTTP, and the WebSockets of the port proxy
and the web terminal (Django Channels); static files come from WhiteNoise as before.

On embedded Stripe defaults (no STRIPE_API_KEY, STRIPE_API_BASE or STRIPE_JS_URL in the environment) it also runs
localstripe, a local Stripe stand-in, so the demo can top up without a network or a Stripe account: the three
processes get STRIPE_STANDIN=1 and its URLs, and its webhook points at our endpoint (billing/payments/standin.py).
STRIPE_STANDIN=0 turns that off.
"""
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from django.conf import settings
from django.core.management.base import BaseCommand

from core import embedded_postgres


class Command(BaseCommand):
    help = "Run web + worker + beat + SSH gateway (development). Ctrl-C stops them all."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default=settings.CARDMIX_ADDR)

    def handle(self, *args, addr, **options):
        py = sys.executable
        host, _, port = addr.rpartition(":")
        if settings.EMBEDDED_POSTGRES:  # `make run` started it already; runall alone starts it too
            embedded_postgres.start(settings.VAR_DIR)
        procs, child_env = {}, dict(os.environ)
        standin = self._stripe_standin(addr)
        if standin:
            procs["localstripe"], stripe_env = standin
            child_env.update(stripe_env)
        concurrency = str(settings.WORKER_CONCURRENCY)
        commands = {
            "web": [py, "-m", "uvicorn", "config.asgi:application", "--host", host or "127.0.0.1", "--port", port,
                    "--lifespan", "off"],
            "worker": [py, "-m", "celery", "-A", "config", "worker", "-l", "warning", "-c", concurrency,
                       "-Q", settings.CELERY_TASK_DEFAULT_QUEUE, "-n", "cardmix-worker@%h"],
            "beat": [py, "-m", "celery", "-A", "config", "beat", "-l", "warning",
                     "--schedule", str(settings.VAR_DIR / "celerybeat-schedule")],
            # SSH_GATEWAY_ADDR:SSH_GATEWAY_PORT (127.0.0.1:2222), its host key made in var/ on the first run.
            "ssh-gateway": [py, "manage.py", "ssh_gateway"],
        }
        procs.update({name: subprocess.Popen(cmd, start_new_session=True, env=child_env)
                      for name, cmd in commands.items()})
        self.stdout.write(self.style.SUCCESS(f"Cardmix is running at http://{addr}/  (Ctrl-C stops them all)"))
        self.stdout.write(f"SSH gateway: ssh -p {settings.SSH_GATEWAY_PORT} <instance short id>@{settings.SSH_GATEWAY_ADDR}")
        self.stdout.write("Demo login: demo@cardmix.local / cardmix-demo-2026   ·   Admin: admin@cardmix.local / cardmix-admin-2026")
        if standin:
            self.stdout.write(f"Payments: test mode at localstripe {child_env['STRIPE_API_BASE']} (no real card is charged)")

        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while not stopping:
                for name, proc in procs.items():
                    if proc.poll() is not None:
                        self.stderr.write(f"{name} exited with {proc.returncode}; stopping the others")
                        stopping = True
                time.sleep(0.5)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.time() + 10
            for proc in procs.values():
                try:
                    proc.wait(timeout=max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
            if settings.EMBEDDED_POSTGRES:  # last: the children may still write while they stop
                embedded_postgres.stop(settings.VAR_DIR)

    def _stripe_standin(self, addr: str):
        """Start localstripe on embedded defaults and register our webhook with it: (process, env for the children),
        or None (real Stripe configured, turned off, or localstripe missing or not answering)."""
        configured = [n for n in ("STRIPE_API_KEY", "STRIPE_API_BASE", "STRIPE_JS_URL") if os.environ.get(n)]
        wanted = os.environ.get("STRIPE_STANDIN", "").lower()
        if configured or wanted in ("0", "false", "no", "off"):
            return None
        if importlib.util.find_spec("localstripe") is None:
            self.stderr.write("localstripe is not installed: top-ups are off (pip install -e .)")
            return None
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = open(settings.VAR_DIR / "localstripe.log", "ab")  # noqa: SIM115 - the child writes it until the end
        proc = subprocess.Popen([sys.executable, "-m", "localstripe", "--port", str(port), "--from-scratch"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        base = f"http://127.0.0.1:{port}"
        host, _, web_port = addr.rpartition(":")
        browser_host = host if host not in ("", "0.0.0.0", "::", "[::]") else "127.0.0.1"
        webhook = f"http://{browser_host}:{web_port}/api/v1/billing/stripe/webhook/"
        deadline = time.time() + 30
        while True:
            try:
                body = urllib.parse.urlencode({"url": webhook, "secret": settings.STRIPE_WEBHOOK_SECRET}).encode()
                urllib.request.urlopen(urllib.request.Request(f"{base}/_config/webhooks/cardmix", data=body),
                                       timeout=2).read()
                break
            except (urllib.error.URLError, OSError):
                if proc.poll() is not None or time.time() > deadline:
                    self.stderr.write("localstripe did not start (see var/localstripe.log): top-ups are off")
                    if proc.poll() is None:
                        os.killpg(proc.pid, signal.SIGTERM)
                    return None
                time.sleep(0.2)
        return proc, {"STRIPE_STANDIN": "1", "STRIPE_API_BASE": base,
                      "STRIPE_JS_URL": f"http://{browser_host}:{port}/js.stripe.com/v3/"}
