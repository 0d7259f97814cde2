"""Settings are declared once (core/settings_registry.py, config/settings/): every environment variable the
project's code reads has a declaration, docs/operations/configuration.md is the page generated from them, and a
value that does not parse stops start-up with the variable's name."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import environ
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError

from core import settings_registry
from core.settings_registry import Var, declared

ROOT = Path(__file__).resolve().parent.parent.parent
# The project's own code. Not tests/, bench/, clients/ (their own programs) nor agent/ (the node agent is a
# standard-library program with its own environment, agent/README.md).
SCANNED = ("config", "core", "tenancy", "inventory", "hardware", "billing", "storage", "provisioning", "privacy",
           "console", "webhooks")
# Variables the code reads that are not Cardmix settings, each with why.
NOT_SETTINGS = {
    "PROMETHEUS_MULTIPROC_DIR": "prometheus_client's own variable: config/__init__.py sets it (under CARDMIX_VAR_DIR) "
                                "before anything imports the client, for this process and its children",
    "CARDMIX_FAILPOINT": "crash-test instrumentation (SPEC §3): a test passes it to the child process it crashes, "
                         "core/failpoints.py reads it at each failpoint; never a deployment's setting",
}


# django-environ's readers (`env.get` is a dict's, when `env` names one).
ENV_METHODS = {"str", "bytes", "bool", "int", "float", "decimal", "json", "list", "tuple", "dict", "url", "db_url",
               "db", "cache_url", "cache", "email_url", "email", "search_url", "channels_url", "path", "get_value"}


def _is_os_environ(node: ast.AST) -> bool:
    """`os.environ`, or `environ` imported from os."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
            and node.value.id == "os") or (isinstance(node, ast.Name) and node.id == "environ")


def _is_env(node: ast.AST) -> bool:
    """A django-environ reader: the name `env`, or `environ.Env()` / `Env()` made on the spot."""
    if isinstance(node, ast.Name):
        return node.id == "env"
    if isinstance(node, ast.Call):
        func = node.func
        return (isinstance(func, ast.Attribute) and func.attr == "Env") or (isinstance(func, ast.Name)
                                                                            and func.id == "Env")
    return False


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def env_reads(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each environment variable `path` reads by a literal name: `env("X")`, `env.<type>("X")`,
    `os.environ["X"]`, `os.environ.get("X")`, `os.getenv("X")` (writes such as `os.environ["X"] = …` and
    `os.environ.setdefault` are not reads)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        name = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_os_environ(node.value):
            name = _literal(node.slice)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            if _is_env(func) or (isinstance(func, ast.Attribute) and func.attr in ENV_METHODS and _is_env(func.value)):
                name = _literal(node.args[0])
            elif isinstance(func, ast.Attribute) and func.attr == "get" and _is_os_environ(func.value):
                name = _literal(node.args[0])
            elif (isinstance(func, ast.Attribute) and func.attr == "getenv" and isinstance(func.value, ast.Name)
                  and func.value.id == "os"):
                name = _literal(node.args[0])
        if name is not None:
            found.append((node.lineno, name))
    return found


def undeclared_reads(files, declared_names, allowed=NOT_SETTINGS) -> list[str]:
    """`path:line: NAME` for each read of a variable that is neither declared nor allowed."""
    problems = []
    for path in files:
        for line, name in env_reads(path):
            if name not in declared_names and name not in allowed:
                rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                problems.append(f"{rel}:{line}: {name}")
    return problems


def project_files() -> list[Path]:
    return sorted(p for top in SCANNED for p in (ROOT / top).rglob("*.py"))


def test_every_environment_variable_the_code_reads_is_declared():
    assert settings.INSTALLED_APPS  # the settings, and with them the registry, are loaded
    assert len(declared()) > 150
    assert undeclared_reads(project_files(), declared()) == []


def test_the_allow_list_names_only_variables_the_code_reads_and_no_setting():
    read = {name for path in project_files() for _, name in env_reads(path)}
    assert set(NOT_SETTINGS) <= read, set(NOT_SETTINGS) - read
    assert not set(NOT_SETTINGS) & set(declared())


def test_the_check_reports_an_undeclared_read(tmp_path):
    """The scan can fail: a module reading variables nobody declared is reported, each form of read, line by line."""
    module = tmp_path / "rogue.py"
    module.write_text(
        "import os\n"
        "import environ\n"
        "env = environ.Env()\n"
        'A = env.str("CARDMIX_NOT_DECLARED", default="")\n'
        'B = env("CARDMIX_NOT_DECLARED_CALL")\n'
        'C = os.environ["CARDMIX_NOT_DECLARED_ITEM"]\n'
        'D = os.environ.get("CARDMIX_NOT_DECLARED_GET")\n'
        'E = os.getenv("CARDMIX_NOT_DECLARED_GETENV")\n'
        'F = environ.Env().int("CARDMIX_NOT_DECLARED_ENV", default=1)\n'
        'G = env.int("DB_POOL_MAX", default=8)\n'  # declared: not reported
        'os.environ["CARDMIX_WRITTEN"] = "1"\n'  # a write, not a read
        'os.environ.setdefault("CARDMIX_DEFAULTED", "1")\n'
    )
    assert undeclared_reads([module], declared()) == [
        f"{module}:4: CARDMIX_NOT_DECLARED", f"{module}:5: CARDMIX_NOT_DECLARED_CALL",
        f"{module}:6: CARDMIX_NOT_DECLARED_ITEM", f"{module}:7: CARDMIX_NOT_DECLARED_GET",
        f"{module}:8: CARDMIX_NOT_DECLARED_GETENV", f"{module}:9: CARDMIX_NOT_DECLARED_ENV",
    ]


def _manage(*args, env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST") and k != "DJANGO_SETTINGS_MODULE"}
    env.update(env_extra)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_configuration_page_is_generated_from_the_declarations(tmp_path):
    """`settings_doc --check` passes, from a process whose environment differs: the page depends only on the
    declarations (a default computed from the environment shows its doc_default)."""
    result = _manage("settings_doc", "--check", env_extra={
        "CARDMIX_VAR_DIR": str(tmp_path / "var"), "SITE_URL": "https://cloud.example.com", "DEBUG": "false",
        "SSH_GATEWAY_PORT": "2022", "WEBHOOK_RETRY_SCHEDULE": "1,2,3"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "up to date" in result.stdout


def test_the_page_check_fails_when_a_declaration_is_not_on_it(monkeypatch):
    monkeypatch.setattr(settings_registry, "_VARS", dict(settings_registry._VARS))
    monkeypatch.setattr(settings_registry, "_SECTIONS", list(settings_registry._SECTIONS))
    monkeypatch.setattr(settings_registry, "_current", [])
    settings_registry.section("Logging")
    settings_registry.declare("CARDMIX_NEW_KNOB", "int", 1, "a setting someone added without regenerating the page")
    with pytest.raises(CommandError, match="out of date"):
        call_command("settings_doc", "--check")


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("DB_POOL_MAX", "abc", "expected an integer"),
    ("PROXY_MODE", "sideways", "must be one of 'path', 'subdomain'"),
])
def test_a_wrong_value_stops_start_up_naming_the_variable(name, value, expected):
    result = _manage("check", env_extra={name: value})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and name in result.stderr and expected in result.stderr, (
        result.stderr[-2000:])


def _var(kind, default, **kw) -> Var:
    return Var("CARDMIX_TEST_VALUE", kind, default, "a test variable", **kw)


@pytest.mark.parametrize(("kind", "default", "method", "raw"), [
    ("int", 5, "int", "42"), ("int", 5, "int", " 7 "),
    ("float", 1.0, "float", "2.5"), ("float", 1.0, "float", "-0.25"), ("float", 1.0, "float", "60"),
    ("bool", False, "bool", "yes"), ("bool", True, "bool", "off"), ("bool", False, "bool", "1"),
    ("bool", True, "bool", ""), ("bool", False, "bool", "TRUE"),
    ("list", [], "list", "a,b,,c"), ("list", ["x"], "list", ""),
    ("str", "d", "str", "value"), ("str", None, "str", ""),
    ("json", {}, "json", '{"cn-north-1": "/mnt/cn1"}'),
    ("db_url", "postgres://u@h/d", "db_url", "postgres://user:pw@db.example:5433/cardmix"),
])
def test_valid_values_read_as_django_environ_reads_them(monkeypatch, kind, default, method, raw):
    """The declarations change nothing for a valid environment: each value is what env.<type>() gave before."""
    monkeypatch.setenv("CARDMIX_TEST_VALUE", raw)
    assert _var(kind, default).read() == getattr(environ.Env(), method)("CARDMIX_TEST_VALUE", default=default)


def test_unset_gives_the_default_and_a_proxy_is_followed(monkeypatch):
    monkeypatch.delenv("CARDMIX_TEST_VALUE", raising=False)
    assert _var("int", 5).read() == 5
    monkeypatch.setenv("CARDMIX_TEST_OTHER", "9")
    monkeypatch.setenv("CARDMIX_TEST_VALUE", "$CARDMIX_TEST_OTHER")
    assert _var("int", 5).read() == 9


@pytest.mark.parametrize(("kind", "default", "raw", "message"), [
    ("int", 5, "5.5", "expected an integer"),
    ("float", 1.0, "1,5", "expected a number"),
    ("bool", False, "maybe", "expected a boolean"),
    ("int_list", [1], "1,x", "expected a comma-separated list of integers"),
    ("json", [], "{", "expected JSON"),
    ("json", [], '{"a": 1}', "an array"),
    ("url", "", "example.com", "expected a URL"),
    ("url", "", "redis://h:port/0", "expected a URL"),
    ("db_url", "postgres://u@h/d", "not a url", "expected a database URL"),
])
def test_a_wrong_value_names_the_variable_and_what_it_expected(monkeypatch, kind, default, raw, message):
    monkeypatch.setenv("CARDMIX_TEST_VALUE", raw)
    with pytest.raises(ImproperlyConfigured, match=message) as caught:
        _var(kind, default).read()
    assert "CARDMIX_TEST_VALUE" in str(caught.value)


def test_a_url_error_never_shows_its_password(monkeypatch):
    monkeypatch.setenv("CARDMIX_TEST_VALUE", "postgres://cardmix:s3cret-pw@db:port/cardmix")
    with pytest.raises(ImproperlyConfigured) as caught:
        _var("db_url", "postgres://u@h/d").read()
    assert "s3cret-pw" not in str(caught.value)


def test_a_value_outside_the_choices_is_refused(monkeypatch):
    monkeypatch.setenv("CARDMIX_TEST_VALUE", "sideways")
    with pytest.raises(ImproperlyConfigured, match="must be one of 'path', 'subdomain'"):
        _var("str", "path", choices=("path", "subdomain")).read()


def test_every_declaration_has_help_and_a_section():
    for var in declared().values():
        assert var.help and var.section is not None, var.name
        assert var.doc_default is not None or var.type != "db_url", var.name
