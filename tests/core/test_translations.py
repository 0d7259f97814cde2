"""i18n: the zh-hans catalog covers every string the code marks for translation, and nothing in it is fuzzy.

bin/messages (`make messages`) runs makemessages on a copy of the working tree, so the committed .po files are
never touched; whatever msgid the copy's merged catalog has without a translation, or only a fuzzy one, is
missing from the committed catalog."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

ROOT = Path(__file__).resolve().parents[2]
CATALOGS = ("django.po", "djangojs.po")
# What the copy leaves out: build output, caches and what makemessages skips anyway.
SKIP = shutil.ignore_patterns(".git", ".venv", "var", "test-artifacts", "node_modules", "__pycache__", "*.pyc",
                              ".pytest_cache", ".hypothesis", ".ruff_cache", "build", "*.egg-info", "*.mo", "shared")

FIX = ("Fix: run `make messages` (bin/messages: makemessages for zh_Hans, then compile), translate each entry "
       "that has an empty msgstr or a `#, fuzzy` flag in locale/zh_Hans/LC_MESSAGES/{catalog} (remove the flag "
       "once the translation is right), and commit the .po file.")


def _untranslated(po: Path) -> list[str]:
    with po.open("rb") as fh:
        catalog = read_po(fh)
    bad = []
    for message in catalog:
        if not message.id:
            continue  # the header
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        if message.fuzzy or not all(strings):
            msgid = message.id[0] if isinstance(message.id, tuple) else message.id
            where = ", ".join(path for path, _ in message.locations) or "?"
            bad.append(f"{'fuzzy' if message.fuzzy else 'missing'}: {msgid!r} ({where})")
    return bad


@pytest.mark.gettext
def test_zh_hans_catalog_is_complete(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=SKIP, symlinks=True)
    env = {**os.environ, "PY": sys.executable, "CARDMIX_VAR_DIR": str(tmp_path / "var")}
    run = subprocess.run(["bin/messages"], cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    problems = []
    for name in CATALOGS:
        po = tree / "locale" / "zh_Hans" / "LC_MESSAGES" / name
        committed = ROOT / "locale" / "zh_Hans" / "LC_MESSAGES" / name
        if not po.exists():
            continue  # no string of that domain in the code
        bad = _untranslated(po)
        if bad or not committed.exists():
            problems.append(f"{name}: {len(bad)} entries need a translation:\n  " + "\n  ".join(bad[:60])
                            + ("\n  …" if len(bad) > 60 else "") + "\n" + FIX.format(catalog=name))
    assert not problems, "\n\n".join(problems)


PLACEHOLDER = re.compile(r"%\([^)]+\)[0-9]*[sd]|%[sd]|\{[^{}\s]+\}")


def test_translations_keep_every_placeholder():
    """A msgstr that drops or renames a %(name)s raises KeyError (or reads wrong) when the page renders."""
    po = ROOT / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
    with po.open("rb") as fh:
        catalog = read_po(fh)
    bad = []
    for message in catalog:
        if not message.id or not message.string:
            continue
        ids = message.id if isinstance(message.id, tuple) else (message.id,)
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        wanted = sorted(set(PLACEHOLDER.findall(ids[-1])))
        for string in strings:
            if string and sorted(set(PLACEHOLDER.findall(string))) != wanted:
                bad.append(f"{ids[0]!r}: {string!r} (needs {wanted})")
    assert not bad, "Placeholders differ from the msgid:\n  " + "\n  ".join(bad)


def test_the_committed_catalog_has_no_fuzzy_or_empty_entry():
    """The same check on the committed file alone (runs without GNU gettext)."""
    po = ROOT / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
    bad = _untranslated(po)
    assert not bad, "\n  ".join([f"{len(bad)} entries need a translation:", *bad[:60]]) + "\n" + FIX.format(
        catalog="django.po")
