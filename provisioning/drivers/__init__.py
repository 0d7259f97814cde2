"""Node drivers behind one interface; get_driver("simulated", ...) picks one by name."""

from __future__ import annotations

from . import simulated as _simulated  # noqa: F401 - registers "simulated"
from .base import Driver, DriverOutput, NodeRef, readiness_command
from .registry import driver_names, get_driver, register_driver

__all__ = [
    "Driver",
    "DriverOutput",
    "NodeRef",
    "driver_names",
    "get_driver",
    "readiness_command",
    "register_driver",
]
