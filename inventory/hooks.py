"""Capacity events: higher apps (provisioning's waitlist) register listeners; inventory never imports them.

A listener is called as `fn(accelerator_ids=[...] | None, zone_ids=[...] | None)` after the
transaction that freed capacity commits. None means "unknown: anything may have changed".
"""
import logging

from django.db import transaction

logger = logging.getLogger("cardmix.inventory")

_listeners: list = []


def register_capacity_listener(fn):
    """Register `fn` once (usable as a decorator); call it from an AppConfig.ready()."""
    if fn not in _listeners:
        _listeners.append(fn)
    return fn


def unregister_capacity_listener(fn) -> None:
    """Remove a listener (tests)."""
    if fn in _listeners:
        _listeners.remove(fn)


def _ids(values):
    return None if values is None else sorted({str(v) for v in values})


def capacity_changed(*, accelerator_ids=None, zone_ids=None) -> None:
    """Tell every listener, once the current transaction commits, that capacity became available."""
    acc, zones = _ids(accelerator_ids), _ids(zone_ids)

    def notify():
        for fn in list(_listeners):
            try:
                fn(accelerator_ids=acc, zone_ids=zones)
            except Exception:  # one broken listener must not hide the event from the others
                logger.exception("capacity listener failed", extra={"listener": repr(fn)})

    transaction.on_commit(notify)


# BMC credentials live in hardware (above inventory): it registers how to tell which names exist.
_bmc_credential_lookup = None


def register_bmc_credential_lookup(fn):
    """`fn(names) -> set` of those names that no BMC credential has; hardware registers it in AppConfig.ready()."""
    global _bmc_credential_lookup
    _bmc_credential_lookup = fn
    return fn


def bmc_credentials_missing(names) -> set:
    """The names (Node.bmc_credentials_ref values) that name no BMC credential; empty ones are never missing.
    Without a registered lookup (hardware not installed) nothing can be checked, and nothing is missing."""
    names = {n for n in names if n}
    if not names or _bmc_credential_lookup is None:
        return set()
    return set(_bmc_credential_lookup(names))


# Card holders are instances (provisioning, above inventory): it registers how to name them for operators.
_holder_describer = None


def register_holder_describer(fn):
    """`fn(holder_ids) -> {str(holder id): {"name", "org", "url", "org_url"}}`; provisioning registers it in
    AppConfig.ready()."""
    global _holder_describer
    _holder_describer = fn
    return fn


def holders_describe(holder_ids) -> dict:
    """{str(holder id): description} for the instances among `holder_ids` ({} without a registered describer)."""
    ids = {str(i) for i in holder_ids if i}
    if not ids or _holder_describer is None:
        return {}
    return _holder_describer(ids)


# A custom image deleted: storage closes the meter of a saved one (billing sits above inventory).
_image_deleted_listeners: list = []


def register_custom_image_deleted(fn):
    """`fn(image_id=)`, called inside the deleting transaction (so a meter closes with the row); from ready()."""
    if fn not in _image_deleted_listeners:
        _image_deleted_listeners.append(fn)
    return fn


def custom_image_deleted(*, image_id) -> None:
    for fn in list(_image_deleted_listeners):
        fn(image_id=image_id)
