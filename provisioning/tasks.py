"""Thin Celery tasks: load an id, run the next steps of its lifecycle (each one resumable)."""
import logging
import time

from celery import shared_task

from core.logging import log_context
from inventory.models import Node

from .choices import InstanceState as S
from .models import Instance
from .services import images, steps

logger = logging.getLogger("cardmix.provisioning")
# A node_clean re-check waits at most this long: an ETA message held past the Redis visibility timeout
# (1 h) would be redelivered as a second copy.
NODE_CLEAN_RECHECK_MAX_S = 1800

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
    state = Instance.objects.filter(pk=instance_id).values_list("state", flat=True).first()
    for _ in range(10):  # provisioning → checking → running is three hops; the bound guards loops
        step = _STEPS.get(state)
        if step is None:
            break
        started = time.perf_counter()
        with log_context(instance_id=instance_id):  # observability: instance id on every log line of the step
            step(instance_id)
        after = Instance.objects.filter(pk=instance_id).values_list("state", flat=True).first()
        logger.info("provisioning step", extra={"instance_id": str(instance_id), "step": step.__name__,
                                                "from_state": state, "to_state": after,
                                                "duration_s": round(time.perf_counter() - started, 3)})
        if after == state:
            break  # the step could not progress (someone else moved it, or it waits)
        state = after  # the next hop starts from this read (one statement a hop, not two)
    return str(state)


@shared_task(name="provisioning.waitlist_wake")
def waitlist_wake() -> int:
    """Try to place waitlisted instances, first come first served; returns how many were woken."""
    from .services.waitlist import waitlist_wake as wake

    return wake()


# --- SLA, reconciler, expiry, auto-stop (services/sla.py, reconciler.py, retention.py, autostop.py) ---

@shared_task(name="provisioning.sla_settle")
def sla_settle_task(instance_id: str):
    """Settle one instance's SLA window (compensation once per breach id); µCNY granted or None."""
    from .services.sla import sla_settle

    return sla_settle(instance_id=instance_id)


@shared_task(name="provisioning.sla_settle_due")
def sla_settle_due_task() -> int:
    """Beat: settle every SLA window whose outcome is known; returns how many breaches were compensated."""
    from .services.sla import sla_settle_due

    return sla_settle_due()


@shared_task(name="provisioning.reconcile")
def reconcile_task() -> dict:
    """Beat: finish or roll back stuck instances, release leaked cards, close leaked meters."""
    from .services.reconciler import reconcile

    return reconcile()


@shared_task(name="provisioning.expire_due")
def expire_due_task() -> int:
    """Beat: terminate waitlisted instances past their expiry and stopped ones past their retention."""
    from .services.retention import instances_expire_due

    return instances_expire_due()


@shared_task(name="provisioning.instances_autostop")
def instances_autostop_task(org_id: str, at: str | None = None, reason: str = "funds_exhausted") -> int:
    """Auto-stop scheduled for the exhaustion second `at` (ISO): stop the organization's on-demand instances."""
    from django.utils.dateparse import parse_datetime

    from .services.instances import instances_autostop

    return len(instances_autostop(org_id=org_id, at=parse_datetime(at) if at else None, reason=reason))


@shared_task(name="provisioning.node_clean", bind=True, max_retries=None)
def node_clean_task(self, node_id: str, previous_state: str | None = None) -> str:
    """Clean one node after a bare-metal instance (wipe + health check); returns its final state.

    While another pass holds the node, look again later: that pass may belong to a worker that died
    (a redelivery after a crash arrives at once), and only a later look can take its expired claim over.
    """
    from .services.cleaning import PassTaken, node_clean

    try:
        return node_clean(node=Node.objects.get(pk=node_id), previous_state=previous_state).state
    except PassTaken as taken:
        if self.request.is_eager:  # development: no broker to wait with
            return "taken"
        raise self.retry(countdown=min(taken.retry_after + 5, NODE_CLEAN_RECHECK_MAX_S)) from taken


@shared_task(name="provisioning.instances_dark_sweep")
def instances_dark_sweep_task() -> dict:
    """After a heartbeat check or a returning heartbeat, and by beat: act on instances whose node went dark."""
    from .services.dark import instances_dark_sweep

    return instances_dark_sweep()


@shared_task(name="provisioning.card_retest", bind=True, max_retries=None)
def card_retest_task(self, retest_id: int) -> str:
    """The second pass of released cards (services/retest.py); returns its state. While the node is being wiped
    or its agent is missing, look again later."""
    from .services.retest import RetestWaits, card_retest_run

    try:
        return card_retest_run(retest_id=retest_id)
    except RetestWaits as waits:
        if self.request.is_eager:
            return "waiting"
        raise self.retry(countdown=60) from waits


@shared_task(name="provisioning.health_incidents_sweep")
def health_incidents_sweep_task() -> dict:
    """By beat: incidents and billing splits a failed card health listener left undone (services/health_sweep.py)."""
    from .services.health_sweep import health_incidents_sweep

    return health_incidents_sweep()


@shared_task(name="provisioning.warm_pools_refill")
def warm_pools_refill_task() -> dict:
    """By beat and after each take: keep every warm pool filled and its checks fresh (services/warm_pool.py)."""
    from .services.warm_pool import warm_pools_refill

    return warm_pools_refill()


@shared_task(name="provisioning.warm_node_prepare")
def warm_node_prepare_task(warm_id: str) -> str:
    """Deploy one node claimed for a warm pool with its image, then check it."""
    from .services.warm_pool import warm_node_prepare

    return warm_node_prepare(warm_id=warm_id)


@shared_task(name="provisioning.warm_node_verify")
def warm_node_verify_task(warm_id: str) -> str:
    """Re-verify one warm node whose check is older than WARM_POOL_MAX_AGE_HOURS."""
    from .services.warm_pool import warm_node_verify

    return warm_node_verify(warm_id=warm_id)


@shared_task(name="provisioning.image_save")
def image_save_task(image_id: str, group_id: int) -> str:
    """"Save as image": the node commits and pushes, then the image is read back and billed (services/images.py)."""
    saved = images.image_save_run(image_id=image_id, group_id=group_id)
    return getattr(saved, "state", "gone")
