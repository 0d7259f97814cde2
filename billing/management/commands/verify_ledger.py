"""`manage.py verify_ledger`: recompute balances from transfers; exit 1 on any difference."""
from django.core.management.base import BaseCommand, CommandError

from billing.verify import ledger_verify


class Command(BaseCommand):
    help = "Recompute every account balance from the transfers, check they sum to zero; non-zero exit on a difference."

    def add_arguments(self, parser):
        parser.add_argument("--incremental", action="store_true",
                            help="sum only the transfers since the stored checkpoint (the beat's run), and advance it")

    def handle(self, *args, **options):
        problems = ledger_verify(full=not options["incremental"])
        for p in problems:
            self.stderr.write(p)
        if problems:
            raise CommandError(f"ledger verification failed: {len(problems)} difference(s)")
        self.stdout.write(self.style.SUCCESS("ledger OK: balances equal their transfers and sum to zero"))
