"""Driver registry: name → driver class, so settings can pick one by name."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .base import Driver

_DRIVERS: dict[str, type[Driver]] = {}
# Drivers that need Django (agent, redfish) register on first use, so importing this package stays pure.
_LAZY = {"agent": "provisioning.drivers.agent", "redfish": "provisioning.drivers.redfish"}


def register_driver(name: str) -> Callable[[type[Driver]], type[Driver]]:
    """Class decorator: make a driver available to get_driver(name)."""

    def decorate(cls: type[Driver]) -> type[Driver]:
        cls.name = name
        _DRIVERS[name] = cls
        return cls

    return decorate


def get_driver(name: str, **options: Any) -> Driver:
    """A new driver instance; options go to its constructor (taken from settings by the caller)."""
    if name not in _DRIVERS and name in _LAZY:
        importlib.import_module(_LAZY[name])
    try:
        cls = _DRIVERS[name]
    except KeyError:
        raise LookupError(f"unknown driver {name!r}; registered: {sorted(_DRIVERS)}") from None
    return cls(**options)


def driver_names() -> list[str]:
    """Names of the registered drivers."""
    return sorted(set(_DRIVERS) | set(_LAZY))
