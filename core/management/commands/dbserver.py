"""Start, stop or locate the demo's embedded PostgreSQL (core/embedded_postgres.py).

    manage.py dbserver start    # the first run initialises var/postgres/; prints the database's URL
    manage.py dbserver stop
    manage.py dbserver status   # exit 1 when it is not running
    manage.py dbserver url

With DATABASE_URL set there is no embedded server: `start` and `stop` say so and do nothing.
"""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from core import embedded_postgres


class Command(BaseCommand):
    help = "Start, stop or locate the embedded PostgreSQL that serves when DATABASE_URL is unset."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["start", "stop", "status", "url"])

    def handle(self, *args, action, **options):
        var = settings.VAR_DIR
        if action == "url":
            self.stdout.write(embedded_postgres.url(var))
            return
        if not settings.EMBEDDED_POSTGRES:
            if action == "status":
                raise CommandError("DATABASE_URL is set: no embedded PostgreSQL serves this deployment")
            self.stderr.write(f"DATABASE_URL is set: nothing to {action} (the embedded server serves only without it)")
            return
        if action == "start":
            self.stdout.write(embedded_postgres.start(var))
        elif action == "stop":
            stopped = embedded_postgres.stop(var)
            self.stderr.write("embedded PostgreSQL stopped" if stopped else "embedded PostgreSQL was not running")
        elif not embedded_postgres.running(var):
            raise CommandError(f"embedded PostgreSQL is not running ({embedded_postgres.data_dir(var)})")
        else:
            self.stdout.write(f"running: {embedded_postgres.url(var)}")
