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


# Card health listeners: a higher app (provisioning) acts on new degraded/failed signals of a node's cards (hardware
# /card_health.py), called as `fn(*, node_id, signals)` with the new CardSignal rows after they committed.
_health_listeners: list = []


def register_card_health_listener(fn):
    """Register `fn` once; call it from an AppConfig.ready()."""
    if fn not in _health_listeners:
        _health_listeners.append(fn)
    return fn


def card_health_reported(*, node_id, signals) -> None:
    for fn in list(_health_listeners):
        try:
            fn(node_id=node_id, signals=signals)
        except Exception:
            logger.exception("card health listener %s failed for node %s", getattr(fn, "__name__", fn), node_id)
