"""Thin Celery tasks: load an id, run the next steps of its lifecycle (each one resumable)."""
from celery import shared_task

from .choices import InstanceState as S
from .models import Instance
from .services import steps

# What the worker does in each state; states not listed wait for a person or another process.
_STEPS = {
    S.PROVISIONING: steps.instance_provision,
    S.CHECKING: steps.instance_check,
    S.STOPPING: steps.instance_stop_finish,
    S.TERMINATING: steps.instance_terminate_finish,
}


@shared_task(name="provisioning.instance_advance")
def instance_advance(instance_id: str) -> str:
    """Drive an instance through the worker-owned states until it rests; returns the final state."""
    state = None
    for _ in range(10):  # provisioning → checking → running is three hops; the bound guards loops
        state = Instance.objects.filter(pk=instance_id).values_list("state", flat=True).first()
        step = _STEPS.get(state)
        if step is None:
            break
        step(instance_id)
        after = Instance.objects.filter(pk=instance_id).values_list("state", flat=True).first()
        if after == state:
            break  # the step could not progress (someone else moved it, or it waits)
        state = after
    return str(state)


@shared_task(name="provisioning.waitlist_wake")
def waitlist_wake() -> int:
    """Try to place waitlisted instances, first come first served; returns how many were woken."""
    from .services.waitlist import waitlist_wake as wake

    return wake()
