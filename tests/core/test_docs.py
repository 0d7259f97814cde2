"""The manual (docs/, built by MkDocs from mkdocs.yml) builds with --strict and no warning: every link and anchor
between its pages resolves, and every page is in the nav. The README stays a front page (at most 200 lines), and
the relative links of the markdown files at the root point at files that exist."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
README_MAX_LINES = 200
ROOT_PAGES = ("README.md", "CONTRIBUTING.md", "SECURITY.md")

# [text](target) and ![alt](target), with an optional "title"; code is removed before matching.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:.+?)\1", re.DOTALL)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def mkdocs_build(config: Path, site_dir: Path) -> tuple[int, str]:
    """`mkdocs build --strict` of `config` into `site_dir`: its exit status and everything it printed."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's end-of-life banner is not a build warning
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site_dir)],
        cwd=config.parent, capture_output=True, text=True, env=env, timeout=150,
    )
    return result.returncode, result.stdout + result.stderr


def build_problems(output: str) -> list[str]:
    return [line for line in output.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)]


def relative_links(markdown: str) -> list[str]:
    """Every link target that names a file of this repository (no scheme, not just an anchor)."""
    text = CODE_SPAN.sub("", FENCE.sub("", markdown))
    targets = [m.group(1) for m in LINK.finditer(text)]
    return [t for t in targets if not SCHEME.match(t) and not t.startswith("#")]


def test_the_manual_builds_strict_with_no_warning(tmp_path):
    status, output = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert status == 0 and build_problems(output) == [], output
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_strict_build_fails_on_a_broken_link_or_anchor(tmp_path):
    """The check above can fail: a copy of the manual with one missing page and one missing anchor does not build."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[gone](operations/no-such-page.md) · [nowhere](spec.md#no-such-anchor)\n")
    status, output = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    problems = build_problems(output)
    assert status != 0, output
    assert any("no-such-page.md" in line for line in problems), output
    assert any("no-such-anchor" in line for line in problems), output


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_the_root_pages_link_only_to_files_that_exist():
    missing = []
    for name in ROOT_PAGES:
        links = relative_links((ROOT / name).read_text())
        if name == "README.md":
            assert links, "the link parser found no link in README.md"
        for target in links:
            path = target.split("#", 1)[0]
            if path and not (ROOT / path).exists():
                missing.append(f"{name}: {target}")
    assert missing == []


def test_the_link_parser_sees_links_and_skips_code():
    sample = (
        "See [setup](docs/development/setup.md#make-run), ![shot](docs/images/console.png \"the console\"),\n"
        "[site](https://example.com), [top](#top) and `[not](a/link.md)`.\n"
        "```\n[neither](in/a/fence.md)\n```\n"
    )
    assert relative_links(sample) == ["docs/development/setup.md#make-run", "docs/images/console.png"]
