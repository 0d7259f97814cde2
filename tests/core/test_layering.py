"""Dependencies between the apps point one way (docs/architecture/overview.md): an app imports only
the apps below it. Every import counts, the ones inside functions too — a lazy import is still a dependency.
A lower app that must make a higher one act calls a hook registry the higher app fills in its `ready()`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

# app -> the apps it may import, lowest first. `config` wires the project (settings, urls, the Celery app)
# and may import any app; no app imports `config` (core reads the Celery app through celery.current_app).
# The node agent is standard library only: it imports no app.
ALLOWED = {
    "core": set(),
    "tenancy": {"core"},
    "inventory": {"core", "tenancy"},
    "hardware": {"core", "tenancy", "inventory"},
    # webhooks sits beside inventory: it needs only organizations, and billing and provisioning publish to it.
    "webhooks": {"core", "tenancy"},
    "billing": {"core", "tenancy", "inventory", "hardware", "webhooks"},
    "storage": {"core", "tenancy", "inventory", "hardware", "billing", "webhooks"},
    "provisioning": {"core", "tenancy", "inventory", "hardware", "billing", "storage", "webhooks"},
    # privacy: the organization export and account deletion read (and erase) across every app below it.
    "privacy": {"core", "tenancy", "inventory", "hardware", "billing", "storage", "provisioning", "webhooks"},
    "console": {"core", "tenancy", "inventory", "hardware", "billing", "storage", "provisioning", "webhooks",
                "privacy"},
    "config": {"core", "tenancy", "inventory", "hardware", "billing", "storage", "provisioning", "webhooks",
               "privacy", "console"},
    "agent": set(),
}


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `tree`, at any depth; relative ones resolved against
    `module` (the dotted name of the file, a package's being its folder's)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base = parts if is_package else parts[:-1]
                base = base[:len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            found.append((node.lineno, name))
    return found


def forbidden_imports(root: Path, allowed: dict[str, set[str]]) -> list[str]:
    """`path:line: app imports other` for each import under `root` from one app of `allowed` into another it
    may not import."""
    problems = []
    for app, may in sorted(allowed.items()):
        for path in sorted((root / app).rglob("*.py")):
            rel = path.relative_to(root)
            is_package = path.name == "__init__.py"
            module = ".".join(rel.parent.parts if is_package else rel.with_suffix("").parts)
            for line, name in imported_modules(ast.parse(path.read_text(), str(path)), module, is_package):
                other = name.split(".")[0]
                if other != app and other in allowed and other not in may:
                    problems.append(f"{rel}:{line}: {app} imports {name}")
    return problems


def test_apps_import_only_the_apps_below_them():
    assert forbidden_imports(ROOT, ALLOWED) == []


def test_every_app_is_in_the_table():
    """A new app has to take its place in the order before it can import anything."""
    apps = {p.parent.name for p in ROOT.glob("*/apps.py")}
    assert apps <= set(ALLOWED), apps - set(ALLOWED)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_check_finds_an_upward_import_at_any_depth(tmp_path):
    _write(tmp_path, {
        "low/__init__.py": "",
        "low/models.py": "import json\n",
        "low/services.py": "def f():\n    from high.models import Thing\n    return Thing\n",
        "low/sub/__init__.py": "",
        "low/sub/deep.py": "import high.api.views\n",
        "high/__init__.py": "",
        "high/models.py": "from low.models import json\nfrom . import views\n",
        "high/views.py": "from .models import json\nfrom ..low import models\n",
    })
    assert forbidden_imports(tmp_path, {"low": set(), "high": {"low"}}) == [
        "low/services.py:2: low imports high.models",
        "low/sub/deep.py:1: low imports high.api.views",
    ]


def test_the_check_passes_a_tree_that_keeps_the_direction(tmp_path):
    _write(tmp_path, {
        "low/__init__.py": "",
        "low/hooks.py": "_listeners = []\n",
        "high/__init__.py": "",
        "high/apps.py": "def ready():\n    from low.hooks import _listeners\n    _listeners.append(print)\n",
    })
    assert forbidden_imports(tmp_path, {"low": set(), "high": {"low"}}) == []
