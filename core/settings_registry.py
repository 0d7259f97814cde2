"""Settings declared once: each environment variable Cardmix reads has one declaration here, with its type,
default, choices and a line of help, and the value read from the environment comes back validated.

    from core.settings_registry import section, setting

    section("Database", "PostgreSQL, always.")           # the table the following declarations belong to
    DB_POOL_MAX = setting("DB_POOL_MAX", "int", 8, "the web's pool size per process")
    PROXY_MODE = setting("PROXY_MODE", "str", "path", "where ports are served", choices=("path", "subdomain"))

The settings modules (config/settings/) declare every variable; `manage.py settings_doc` writes
docs/operations/configuration.md from the declarations, and tests/core/test_configuration.py fails on a variable
read anywhere in the project's code without one. A value that does not parse (not an integer, not one of the
choices, a malformed URL, JSON of the wrong shape) stops the process at start-up with ImproperlyConfigured naming
the variable and what it expected.

Values are read and parsed with django-environ, as before the declarations: the same strings give the same values
(its true words for booleans, comma-split lists, `$OTHER` proxies, database URLs as Django's DATABASES entry), so
nothing changes for a valid environment; the declarations only refuse what django-environ let through or crashed
on later (`DEBUG=maybe` read as false, `1,5` as a float, a port that is not a number deep in a dict).

This module lives in core, not config, because the generator (a core management command) reads the registry and
no app imports config (tests/core/test_layering.py); the settings modules import it, as they import core already.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

# type -> what the docs call it, and what an error says was expected.
TYPES = {
    "str": ("string", "a string"),
    "int": ("integer", "an integer"),
    "float": ("number", "a number (e.g. 2.5)"),
    "bool": ("boolean", "a boolean (true/false, yes/no, on/off, 1/0)"),
    "list": ("list", "a comma-separated list"),
    "int_list": ("list of integers", "a comma-separated list of integers"),
    "json": ("JSON", "JSON"),
    "url": ("URL", "a URL (scheme://host[:port]/…)"),
    "db_url": ("database URL", "a database URL (postgres://user:password@host:5432/name)"),
}
FALSE_WORDS = ("false", "off", "no", "n", "0", "")
FLOAT = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)\s*")
NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_UNSET = object()
_env = environ.Env()


@dataclass(frozen=True)
class Section:
    """One table of the configuration page: a settings module's domain."""

    title: str
    intro: str


@dataclass(frozen=True)
class Var:
    """One environment variable: its name, type, default, choices and one line of help."""

    name: str
    type: str
    default: Any
    help: str
    choices: tuple = ()
    doc_default: str | None = None  # the default as the page shows it, where it depends on the environment
    section: Section | None = field(default=None, compare=False)

    def raw(self) -> str | None:
        """The variable's string in the environment (`$OTHER` proxies resolved), or None when it is unset."""
        raw = _env.get_value(self.name, cast=str, default=_UNSET)
        return None if raw is _UNSET else raw

    def read(self):
        """The value from the environment (the default when unset), validated; ImproperlyConfigured if it is not
        what the declaration says."""
        raw = _env.get_value(self.name, cast=str, default=_UNSET)  # resolves `$OTHER` proxies as django-environ does
        if raw is _UNSET:
            value = self._default_value()
        elif raw == "" and self.default is None:
            value = None  # django-environ's reading of an empty value with no default
        else:
            value = self._parse(raw)
        if self.choices and value not in self.choices:
            shown = ", ".join(repr(c) for c in self.choices)
            raise ImproperlyConfigured(f"{self.name} must be one of {shown} (got {value!r}).")
        return value

    def _default_value(self):
        if self.type == "db_url":
            return environ.Env.db_url_config(self.default)
        if self.type == "int_list":
            return [int(x) for x in self.default]
        return self.default

    def _error(self, raw: str | None, why: str = "") -> ImproperlyConfigured:
        expected = TYPES[self.type][1]
        shown = "" if raw is None else f"={raw[:80]!r}"
        return ImproperlyConfigured(f"{self.name}{shown} is not valid: expected {expected}{why}.")

    def _parse(self, raw: str):
        kind = self.type
        try:
            if kind in ("str", "list"):
                return environ.Env.parse_value(raw, str if kind == "str" else list)
            if kind == "int":
                return int(raw)
            if kind == "float":
                if not FLOAT.fullmatch(raw):
                    raise self._error(raw)
                return environ.Env.parse_value(raw, float)
            if kind == "bool":
                word = raw.lower().strip()
                if word not in environ.Env.BOOLEAN_TRUE_STRINGS and word not in FALSE_WORDS:
                    try:
                        int(raw)
                    except ValueError:
                        raise self._error(raw) from None
                return environ.Env.parse_value(raw, bool)
            if kind == "int_list":
                return [int(x) for x in environ.Env.parse_value(raw, list)]
            if kind == "json":
                value = json.loads(raw)
                if self.default is not None and type(value) is not type(self.default):
                    shape = "an array" if isinstance(self.default, list) else "an object"
                    raise self._error(raw, f" ({shape})")
                return value
            if kind == "url":
                if raw:  # empty: not configured
                    parts = urlsplit(raw)
                    parts.port  # noqa: B018 - raises ValueError on a port that is not a number
                    if not parts.scheme or not (parts.netloc or parts.scheme == "unix"):
                        raise self._error(None, f", not {_redacted(raw)!r}")
                return raw
            if kind == "db_url":
                if not urlsplit(raw).scheme:
                    raise self._error(None, f", not {_redacted(raw)!r}")
                return environ.Env.db_url_config(raw)
        except ValueError as exc:  # int(), json.loads(), a URL's port; the message names no secret
            raise self._error(raw if kind not in ("url", "db_url") else None, f" ({exc})") from None
        raise AssertionError(kind)


def _redacted(url: str) -> str:
    """A URL as an error may show it: without its user and password."""
    return re.sub(r"//[^/@]*@", "//…@", url)[:80]


_VARS: dict[str, Var] = {}
_SECTIONS: list[Section] = []
_current: list[Section] = []


def section(title: str, intro: str = "") -> Section:
    """Start the table the next declarations belong to (one per settings module)."""
    found = next((s for s in _SECTIONS if s.title == title), None)
    if found is None:
        found = Section(title, intro)
        _SECTIONS.append(found)
    _current[:] = [found]
    return found


def declare(name: str, type: str, default: Any, help: str, *, choices=(), doc_default: str | None = None) -> Var:
    """Register one environment variable and return its declaration (read it with `.read()`)."""
    if not NAME.fullmatch(name):
        raise ImproperlyConfigured(f"{name!r}: a setting's name is upper case (A-Z, 0-9, _).")
    if type not in TYPES:
        raise ImproperlyConfigured(f"{name}: unknown type {type!r} (one of {', '.join(TYPES)}).")
    if not help or "\n" in help:
        raise ImproperlyConfigured(f"{name}: the help is one line.")
    if not _current:
        raise ImproperlyConfigured(f"{name}: declared outside a section (call section() first).")
    if choices and default not in choices:
        raise ImproperlyConfigured(f"{name}: its default {default!r} is not one of its choices.")
    var = Var(name, type, default, help, tuple(choices), doc_default, _current[0])
    earlier = _VARS.get(name)
    if earlier is not None and earlier.section != var.section:
        raise ImproperlyConfigured(f"{name} is declared twice ({earlier.section.title}, {var.section.title}).")
    _VARS[name] = var  # the same module imported again (a reload) replaces its own declaration
    return var


def setting(name: str, type: str, default: Any, help: str, *, choices=(), doc_default: str | None = None):
    """Declare one environment variable and return its validated value."""
    return declare(name, type, default, help, choices=choices, doc_default=doc_default).read()


def read(name: str):
    """The validated value of a variable declared elsewhere (production.py reads its production-only ones so)."""
    return _VARS[name].read()


def declared() -> dict[str, Var]:
    """Every declaration, by name, in the order they were made."""
    return dict(_VARS)


def sections() -> list[tuple[Section, list[Var]]]:
    """The tables of the configuration page: each section with its declarations, in the order they were made."""
    return [(s, [v for v in _VARS.values() if v.section == s]) for s in _SECTIONS]
