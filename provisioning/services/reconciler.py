"""The reconciler (SPEC §3): the recovery path after a crash is a beat task reading rows.

Under the advisory lock "reconciler" (a second beat does nothing) it
- finishes or rolls back instances stuck past their step deadline: re-dispatches the step task
  (steps are resumable) a bounded number of times, then fails provisioning/checking instances with
  their cards released (and the SLA settled), and forces stopping/terminating ones to their end;
- releases every card held by an instance that is not live;
- closes every meter open for an instance that is not `running`, at the second it left running;
- applies a monthly package's end to its instance when the package-end hook was lost (a crash between
  billing's commit and the hook): a monthly instance whose latest period ended without renewing;
- queues a release for every container an agent still runs that no live group holds (orphans.py);
- makes the controller's Slurm partitions match the running hybrids that own their nodes (slurm_partitions.py).
"""
import logging
from datetime import timedelta

from django.db import transaction
from django.db.models import Exists, F, OuterRef

from billing.choices import MeterSubject
from billing.models import Meter
from billing.models_products import Package, PackageState
from core.dbclock import db_now
from core.locks import advisory_lock_held
from inventory.choices import HolderKind
from inventory.models import CardAllocation
from inventory.services import cards_release
from tenancy.audit import audit_record
from tenancy.lock_objects import organization_lock

from ..choices import HOLDING_STATES
from ..choices import InstanceState as S
from ..lock_objects import instance_lock
from ..models import Instance, InstanceEvent
from . import billing_port
from .instances import instance_dispatch, step_deadline
from .orphans import containers_orphaned_release
from .sla import sla_dispatch
from .slurm_partitions import partitions_reconcile
from .steps import groups_release, placement_release_clean
from .transitions import instance_transition

logger = logging.getLogger("cardmix.provisioning")

# States the worker drives; past the step deadline, how many times the step is re-dispatched first.
RETRIES = {S.PROVISIONING: 1, S.CHECKING: 1, S.STOPPING: 2, S.TERMINATING: 2}
# An instance in these states may hold cards (terminating ones release them in the worker, or here when stuck).
MAY_HOLD = frozenset(HOLDING_STATES | {S.TERMINATING})
BATCH = 500
LEAK_GRACE = timedelta(minutes=5)


def _release(instance_id) -> None:
    """Release the instance's groups through the driver, or just the placement when the driver fails.

    Never inside a transaction: an agent node sees its release command only once the command is committed.
    """
    try:
        groups_release(instance_id)
    except Exception:  # the driver is what got it stuck: free the cards anyway
        logger.exception("reconciler: driver release failed; releasing the placement only",
                         extra={"instance": str(instance_id)})
        placement_release_clean(instance=Instance.objects.get(pk=instance_id))


def instance_unstick(*, instance_id) -> str | None:
    """Act on one instance past its step deadline: "resumed", "failed", "forced", or None (not stuck)."""
    org_id = Instance.objects.filter(pk=instance_id).values_list("organization_id", flat=True).first()
    with transaction.atomic():
        # Organization, then instance, as instance_start locks them: a start waiting here cannot deadlock
        # with the card release below.
        if org_id is not None:
            organization_lock(org_id)
        instance = instance_lock(instance_id=instance_id)
        now = db_now()
        state = instance.state
        if state not in RETRIES or instance.step_deadline is None or instance.step_deadline >= now:
            return None
        if instance.step_retries < RETRIES[state]:
            Instance.objects.filter(pk=instance.pk).update(step_retries=F("step_retries") + 1,
                                                           step_deadline=step_deadline(instance, now))
            audit_record(action="instance.reconcile_resume", org=instance.organization, target=instance,
                         details={"state": state, "retry": instance.step_retries + 1})
            instance_dispatch(instance.pk)
            return "resumed"
        reason = f"reconciler: stuck in {state} past its step deadline"
        if state in (S.PROVISIONING, S.CHECKING):
            instance_transition(instance=instance, to=S.FAILED, reason=reason, step_deadline=None)
            outcome = "failed"
        elif state == S.STOPPING:
            instance_transition(instance=instance, to=S.STOPPED, reason=f"{reason} (released)", step_deadline=None)
            outcome = "forced"
        else:
            instance_transition(instance=instance, to=S.TERMINATED, reason=f"{reason} (released)",
                                step_deadline=None, terminated_at=now)
            outcome = "forced"
        audit_record(action=f"instance.reconcile_{outcome}", org=instance.organization, target=instance,
                     details={"state": state})
        if outcome == "forced":
            # Still under the instance's lock: a start right after the commit must find these cards freed,
            # or they would be freed with the placement it makes.
            placement_release_clean(instance=instance)
    if outcome == "failed":
        _release(instance_id)
        sla_dispatch(instance_id)
    return outcome


def cards_leaked_release() -> int:
    """Release the live allocations of instances that are not live (or do not exist); returns how many holders."""
    # Anti-joins in SQL: the pass reads the few leaked holders, never every holder's id (100k at scale).
    live = Instance.objects.filter(pk=OuterRef("holder_id"), state__in=MAY_HOLD)
    # A worker releases a failed instance's cards just after the transition (driver first): leave it time.
    recent = InstanceEvent.objects.filter(instance_id=OuterRef("holder_id"), created_at__gte=db_now() - LEAK_GRACE)
    leaked = sorted(set(CardAllocation.objects.live().filter(holder_kind=HolderKind.INSTANCE)
                        .filter(~Exists(live), ~Exists(recent)).values_list("holder_id", flat=True).distinct()), key=str)
    if not leaked:
        return 0
    known = {i.pk: i for i in Instance.objects.filter(pk__in=leaked)}
    for holder_id in leaked:
        instance = known.get(holder_id)
        if instance is not None:
            # Only in the state judged above: a start landing meanwhile holds cards that are not leaked.
            placement_release_clean(instance=instance, expect=instance.state)
        else:
            cards_release(holder_id=holder_id)
        logger.warning("reconciler released leaked cards", extra={"holder": str(holder_id)})
    return len(leaked)


def _left_running_at(instance_id, opened_at):
    """When the instance left running after a meter opened at `opened_at` (None: unknown → now)."""
    return (InstanceEvent.objects.filter(instance_id=instance_id, from_state=S.RUNNING, created_at__gte=opened_at)
            .exclude(to_state=S.RUNNING).order_by("created_at").values_list("created_at", flat=True).first())


def meters_leaked_close() -> int:
    """Close meters left open for instances that are not running; returns how many instances."""
    # An anti-join in SQL: only the leaked meters come back, not every open meter's instance id.
    running = Instance.objects.filter(pk=OuterRef("instance_id"), state=S.RUNNING)
    # Volume meters run with no instance at all (storage bills them until the volume is deleted): never leaked here.
    opened = dict(Meter.objects.filter(closed_at__isnull=True, subject=MeterSubject.INSTANCE).filter(~Exists(running))
                  .order_by("instance_id", "opened_at").values_list("instance_id", "opened_at"))
    leaked = sorted(opened, key=str)
    for instance_id in leaked:
        billing_port.meters_close(instance_id=instance_id, at=_left_running_at(instance_id, opened[instance_id]))
        logger.warning("reconciler closed a leaked meter", extra={"instance": str(instance_id)})
    return len(leaked)


def packages_ended_apply() -> int:
    """Monthly instances whose latest package period ended without renewing, not yet on demand: apply it."""
    from .packages import instance_package_ended

    # Normally none: a monthly instance has an active period, or none yet (it never ran).
    stranded = (Instance.objects.filter(billing="monthly").exclude(state__in=[S.TERMINATING, S.TERMINATED])
                .exclude(pk__in=Package.objects.filter(state=PackageState.ACTIVE).values("instance_id")))
    latest = {}  # instance id → its latest period (rows come newest period first)
    for row in (Package.objects.filter(instance_id__in=stranded.values("pk")).order_by("instance_id", "-period")
                .values_list("instance_id", "outcome", "ends_at")):
        latest.setdefault(row[0], row)
    done = 0
    for instance_id, outcome, ends_at in latest.values():
        if outcome != "renewed":
            instance_package_ended(instance_id=instance_id, outcome=outcome, at=ends_at)
            logger.warning("reconciler applied a lost package end", extra={"instance": str(instance_id)})
            done += 1
    return done


def reconcile() -> dict:
    """One reconciler pass under the advisory lock; returns what it did, or {"skipped": True}.

    A session lock, not one transaction around the pass: each step commits on its own, and the driver
    releases it makes (agent commands are rows the node polls for) must be visible while they wait.
    """
    with advisory_lock_held("reconciler") as held:
        if not held:
            return {"skipped": True}
        stuck = list(Instance.objects.filter(state__in=list(RETRIES), step_deadline__lt=db_now())
                     .order_by("step_deadline").values_list("pk", flat=True)[:BATCH])
        stats = {"resumed": 0, "failed": 0, "forced": 0}
        for instance_id in stuck:
            outcome = instance_unstick(instance_id=instance_id)
            if outcome:
                stats[outcome] += 1
        stats["cards_released"] = cards_leaked_release()
        stats["meters_closed"] = meters_leaked_close()
        stats["package_ends"] = packages_ended_apply()
        stats["containers_released"] = containers_orphaned_release()
        stats.update(partitions_reconcile())  # Slurm partitions against the controller
    if any(stats.values()):
        logger.info("reconciler pass", extra=stats)
    return stats
