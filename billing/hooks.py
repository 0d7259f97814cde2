"""Hooks through which billing makes higher apps act (billing never imports provisioning).

Provisioning registers its auto-stop at startup: `register_autostop(fn)`, where
fn(*, org_id, at, reason) stops the organization's on-demand instances whose open meters billing capped
(`billable_until_seconds`) and closes those meters with `meters_close(instance_id=..., at=at)`.
"""
_autostop = []


def register_autostop(fn) -> None:
    """Register the function that stops an organization's on-demand instances (the last one wins)."""
    _autostop[:] = [fn]


def autostop_hook():
    """The registered auto-stop function, or None."""
    return _autostop[0] if _autostop else None
