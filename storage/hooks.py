"""Hooks through which storage makes higher apps act (storage never imports provisioning).

Provisioning (its agent driver) registers `register_volume_listener(fn)`: fn(*, event, volume) is called after
the commit of a change the nodes must realise: event "grown" (new quota), "deleted" (remove the directory).
"""
_listeners = []


def register_volume_listener(fn) -> None:
    """Add a listener of volume changes (called in order after each commit; one failing does not stop the rest)."""
    if fn not in _listeners:
        _listeners.append(fn)


def volume_listeners() -> list:
    return list(_listeners)
