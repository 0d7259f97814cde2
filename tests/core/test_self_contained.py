"""The project reads nothing outside its checkout: a fresh clone in an empty folder has nothing beside
it, so no tracked file may name a path that leaves the checkout. (This file builds its samples of
such paths at run time, so that it does not name one itself.)"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

UP = "." * 2  # the parent folder's name, spelt so that this file does not contain it
# A relative path that starts by going up, quoted, bare or after `=` (a path that only ends by going
# up, such as `$(dirname "$0")/` and the parent, is what scripts use to reach the checkout's root).
UP_PATH = re.compile(r"""(?:^|(?<=[\s"'=(:,]))((?:\.\./)+[^\s"'`)\]},;]*)""", re.MULTILINE)


def _escapes(root: Path, base: Path, relative: str) -> bool:
    resolved = (base / relative).resolve()
    return resolved != root and root not in resolved.parents


def _python_escapes(root: Path, path: Path, source: str) -> list[str]:
    """`Path(__file__)` parent chains that climb above the checkout, and literal `..` segments."""
    depth = len(path.relative_to(root).parts)  # parents needed to reach the root itself
    found = []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in (UP, UP + "/"):
            found.append(f"{path.name}:{node.lineno}: a '..' path segment")
        if not (isinstance(node, ast.Attribute | ast.Subscript)):
            continue
        ups, inner = 0, node
        while True:
            if isinstance(inner, ast.Attribute) and inner.attr == "parent":
                ups, inner = ups + 1, inner.value
            elif (isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Attribute)
                  and inner.value.attr == "parents" and isinstance(inner.slice, ast.Constant)):
                ups, inner = ups + inner.slice.value + 1, inner.value.value
            elif isinstance(inner, ast.Attribute | ast.Call) and not isinstance(inner, ast.Name):
                inner = inner.value if isinstance(inner, ast.Attribute) else inner.func
            else:
                break
        mentions_file = any(isinstance(n, ast.Name) and n.id == "__file__" for n in ast.walk(node))
        if mentions_file and ups > depth:
            found.append(f"{path.name}:{node.lineno}: __file__ climbs {ups} folders (the checkout is {depth} up)")
    return found


def outside_references(root: Path, files: list[Path]) -> list[str]:
    """Every place in `files` (text files under `root`) that names a path outside `root`."""
    root = root.resolve()
    beside = str(root.parent).rstrip("/") + "/"
    found: list[str] = []
    for path in files:
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue  # binary data files
        rel = path.relative_to(root)
        for match in UP_PATH.finditer(text):
            token = match.group(1)
            if _escapes(root, path.parent, token) or _escapes(root, root, token):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{rel}:{line}: {token}")
        if beside != "/" and beside in text:
            found.append(f"{rel}: names {beside}, the folder the checkout sits in")
        if path.suffix == ".py":
            found += [f"{rel.parent / f}" for f in _python_escapes(root, path, text)]
    return found


def tracked_files(root: Path) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    return [root / name for name in out.decode().split("\0") if name and (root / name).is_file()]


def test_no_tracked_file_names_a_path_outside_the_checkout():
    files = tracked_files(ROOT)
    assert any(f.name == "Makefile" for f in files) and any(".ci" in f.parts for f in files)
    assert outside_references(ROOT, files) == []


def test_the_check_finds_each_kind_of_outside_path(tmp_path):
    root = tmp_path / "clone"
    (root / "bench").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "config" / "settings").mkdir(parents=True)
    up = UP
    files = {
        "bench/far.py": 'TRACES = Path(__file__).resolve().parent.parent.parent / "beside" / "traces"\n',
        "bench/up.py": 'DATA = Path(__file__).parents[2] / "beside"\n',
        "bench/dots.py": f'DATA = ROOT / "{up}" / "beside"\n',
        "Makefile": f"bench:\n\tpython -m bench.placement --traces {up}/beside/traces/openb\n",
        "bin/run": f'#!/bin/sh\nexec cat "{tmp_path}/beside/docs/SPEC.md"\n',
        # Inside the checkout: none of these may be reported.
        "config/settings/base.py": "BASE_DIR = Path(__file__).resolve().parent.parent.parent\n",
        "bin/ok": f'#!/bin/sh\ncd "$(dirname "$0")/{up}" && ls bench/data/{up}/data\n',
    }
    for name, text in files.items():
        (root / name).write_text(text)
    found = outside_references(root, [root / name for name in files])
    flagged = {line.split(":")[0] for line in found}
    assert flagged == {"bench/far.py", "bench/up.py", "bench/dots.py", "Makefile", "bin/run"}, found
