"""The SLA / waitlist / reconciler tests use the provisioning tests' fixtures: a funded owner, its
session client and a simulator that never fails by chance (faults are forced explicitly)."""
from tests.provisioning.conftest import _deterministic_simulator, client, owner  # noqa: F401
