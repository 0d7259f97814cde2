"""How billing tells provisioning that a package period ended (billing never imports provisioning).

Provisioning registers at startup: `register_package_end(fn)`, where fn(*, instance_id, outcome, at) is
called after the renewal task committed, `at` being the period's end (the second on-demand billing starts),
with outcome
  "renewed"   a new period was charged; the instance stays unmetered,
  "on_demand" the package is over: open meters (on-demand billing) if the instance is running,
  "stop"      the package is over: stop the instance (renew without funds also ends here).
Before opening meters for a monthly instance provisioning asks `package_active(instance_id)`.

It also registers `register_instance_names(fn)`, fn(*, org_id, ids) → {str(id): name}, so billing's emails can
name an instance as its people know it.
"""
import logging

logger = logging.getLogger("cardmix.billing")

_package_end: list = []


def register_package_end(fn) -> None:
    """Register a package-end callback (registering the same function twice keeps one)."""
    if fn not in _package_end:
        _package_end.append(fn)


def unregister_package_end(fn) -> None:
    """Remove a callback (tests)."""
    if fn in _package_end:
        _package_end.remove(fn)


def package_end_notify(*, instance_id, outcome: str, at) -> None:
    """Call every registered callback; one failing does not keep the others from running."""
    for fn in list(_package_end):
        try:
            fn(instance_id=instance_id, outcome=outcome, at=at)
        except Exception:  # noqa: BLE001 - a hook's failure must not undo the committed renewal
            logger.exception("package end hook failed", extra={"instance_id": str(instance_id), "outcome": outcome})


_instance_names: list = []


def register_instance_names(fn) -> None:
    """Register the function that names an organization's instances (the last one wins)."""
    _instance_names[:] = [fn]


def instance_name(*, org_id, instance_id) -> str:
    """The instance's name, or "" when none is registered or the organization has no such instance."""
    if not _instance_names:
        return ""
    return _instance_names[0](org_id=org_id, ids=[instance_id]).get(str(instance_id), "")
