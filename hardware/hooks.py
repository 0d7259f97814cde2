"""Heartbeat listeners: a higher app (storage: its volumes' usage) reads what an agent reported without hardware
importing it. A listener is called as `fn(*, node_id, zone_id, report)` after the heartbeat is stored; one that
fails is logged and never refuses the heartbeat (the node must not go unreachable for a usage figure)."""
import logging

logger = logging.getLogger("cardmix.hardware")

_listeners: list = []


def register_heartbeat_listener(fn):
    """Register `fn` once; call it from an AppConfig.ready()."""
    if fn not in _listeners:
        _listeners.append(fn)
    return fn


def heartbeat_reported(*, node_id, zone_id, report: dict) -> None:
    for fn in list(_listeners):
        try:
            fn(node_id=node_id, zone_id=zone_id, report=report)
        except Exception:
            logger.exception("heartbeat listener %s failed for node %s", getattr(fn, "__name__", fn), node_id)
