"""Compile the translation catalogs (LOCALE_PATHS' .po → .mo) with Babel, in pure Python.

Django's `compilemessages` needs GNU gettext's msgfmt, which neither the slim Docker image nor every
development machine has; the build (`make install`/`make run`, the Dockerfile) and the test setup run this
instead. Fuzzy entries are left out, as msgfmt leaves them out. A .mo newer than its .po is kept.
"""
import os
from pathlib import Path

from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from django.conf import settings
from django.core.management.base import BaseCommand


def compile_catalogs(*, force: bool = False) -> list[Path]:
    """Write each stale .mo (atomically: a running server never reads half a file); return the ones written."""
    written = []
    for root in settings.LOCALE_PATHS:
        for po in sorted(Path(root).glob("*/LC_MESSAGES/*.po")):
            mo = po.with_suffix(".mo")
            if not force and mo.exists() and mo.stat().st_mtime >= po.stat().st_mtime:
                continue
            with po.open("rb") as fh:
                catalog = read_po(fh, abort_invalid=True)
            # Its own temporary name per process: the test workers (and a server's processes) may compile at once.
            tmp = mo.with_suffix(f".mo.{os.getpid()}.tmp")
            with tmp.open("wb") as fh:
                write_mo(fh, catalog, use_fuzzy=False)
            tmp.replace(mo)
            written.append(mo)
    return written


class Command(BaseCommand):
    help = "Compile locale/*/LC_MESSAGES/*.po into .mo files (Babel; no GNU gettext needed)."

    def add_arguments(self, parser):
        parser.add_argument("--force", action="store_true", help="Rewrite every .mo, even one newer than its .po.")

    def handle(self, *args, force=False, **options):
        for mo in compile_catalogs(force=force):
            self.stdout.write(f"compiled {mo}")
