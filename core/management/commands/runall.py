"""Run web, Celery worker and Celery beat together in the foreground; Ctrl-C stops them all."""
import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run web + worker + beat (development). Ctrl-C stops all three."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default=os.environ.get("CARDMIX_ADDR", "127.0.0.1:8000"))

    def handle(self, *args, addr, **options):
        py = sys.executable
        # SQLite has one writer: one worker process (concurrency 1) keeps lock waits short.
        concurrency = "1" if not settings.USING_POSTGRES else os.environ.get("WORKER_CONCURRENCY", "2")
        commands = {
            "web": [py, "manage.py", "runserver", addr, "--noreload"],
            "worker": [py, "-m", "celery", "-A", "config", "worker", "-l", "warning", "-c", concurrency,
                       "-Q", settings.CELERY_TASK_DEFAULT_QUEUE, "-n", "cardmix-worker@%h"],
            "beat": [py, "-m", "celery", "-A", "config", "beat", "-l", "warning",
                     "--schedule", str(settings.VAR_DIR / "celerybeat-schedule")],
        }
        procs = {name: subprocess.Popen(cmd, start_new_session=True) for name, cmd in commands.items()}
        self.stdout.write(self.style.SUCCESS(f"Cardmix is running at http://{addr}/  (Ctrl-C stops web, worker and beat)"))
        self.stdout.write("Demo login: demo@cardmix.local / cardmix-demo-2026   ·   Admin: admin@cardmix.local / cardmix-admin-2026")

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
