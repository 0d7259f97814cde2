"""Running instances on a node that went dark (its agent stopped heartbeating: hardware.heartbeats_check): tell
their users, do not bill them from the node's last heartbeat, and after NODE_DARK_TIMEOUT_SECONDS fail or move them.

One idempotent sweep over rows (`instances_dark_sweep`), run after every heartbeat check that marks a node and every
heartbeat that brings one back (hardware dispatches it by task name through the outbox), and by beat:
- a running instance with a live group on a marked node and no open episode: an episode opens (one per instance),
  its meters close at the last heartbeat + NODE_DARK_GRACE_SECONDS, what ticks charged after that second is
  credited back (`node_dark:<episode>:<meter>`, billing.metering.meters_pause), and its creator is emailed, once;
- an open episode whose instance has no silent node any more (every agent heartbeats again): meters open again at
  the sweep's DB now, so it is charged from the resume; the episode ends `resumed`;
- one past its deadline (last heartbeat + NODE_DARK_TIMEOUT_SECONDS, DB clock): NODE_DARK_ACTION — `fail`
  (running → failed, cards released) or `move` (a container's dark groups placed on other cards in the zone:
  running → provisioning; bare metal, or no room, fails);
- one whose instance left running some other way (stopped, terminated): ends `left`.
Each decision is taken under the instance's row lock (meters, then accounts, as a stop locks them). The notice the
users see is read live from the node's state (notices.py), so it shows the moment the check marks the node.
"""
import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext

from core.dbclock import db_now
from core.mail import send_to_people
from hardware.selectors import dark_nodes
from inventory.services import cards_release
from tenancy.audit import audit_record

from ..choices import GroupState, InstanceKind
from ..choices import InstanceState as S
from ..lock_objects import instance_lock
from ..models import DarkEpisode, Instance, NodeGroup
from . import billing_port, slurm_partitions
from .fleet import driver_touched
from .instances import instance_dispatch, step_deadline
from .orphans import group_container_release
from .transitions import instance_transition

logger = logging.getLogger("cardmix.provisioning")

# State reasons (the console words them for people: console/state_reasons.py).
DARK_FAILED = "node unreachable past its timeout"
DARK_MOVED = "re-placed: node unreachable"
Outcome = DarkEpisode.Outcome


class _NoRoom(Exception):
    """A dark group found no other cards: undo the move's savepoint and fail instead."""


def _live_groups(instance_id) -> list[NodeGroup]:
    return list(NodeGroup.objects.live().filter(instance_id=instance_id)
                .select_related("node__zone").order_by("item_index", "id"))


def instances_dark_sweep() -> dict:
    """Open, resume, act on and end dark episodes (see the module); returns counts per outcome."""
    stats = {"paused": 0, **{o.value: 0 for o in Outcome}}
    marked = dark_nodes()
    if marked:
        ids = set(NodeGroup.objects.live().filter(node_id__in=list(marked), instance__state=S.RUNNING)
                  .exclude(instance_id__in=DarkEpisode.objects.filter(ended_at__isnull=True).values("instance_id"))
                  .values_list("instance_id", flat=True))
        for instance_id in sorted(ids, key=str):
            if dark_begin(instance_id=instance_id) is not None:
                stats["paused"] += 1
    for episode_id in (DarkEpisode.objects.filter(ended_at__isnull=True).order_by("noticed_at")
                       .values_list("pk", flat=True)):
        outcome = dark_follow(episode_id=episode_id)
        if outcome:
            stats[outcome] += 1
    if any(stats.values()):
        logger.info("dark sweep", extra=stats)
    return stats


def dark_begin(*, instance_id) -> DarkEpisode | None:
    """Open the running instance's episode if one of its nodes is marked dark: stop billing at the last heartbeat
    (+ grace), credit what was charged after it, email the creator. None when there is nothing to open."""
    with transaction.atomic():
        instance = instance_lock(instance_id=instance_id)
        if instance.state != S.RUNNING or DarkEpisode.objects.filter(instance=instance, ended_at__isnull=True).exists():
            return None
        dark = dark_nodes({g.node_id for g in _live_groups(instance.pk)})
        if not dark:
            return None
        now = db_now()
        # The earliest silence counts: a hybrid with one part gone is not usable as a whole.
        node_id, last = min(dark.items(), key=lambda kv: kv[1] or now)
        last = last or now
        paused_at = min(last + timedelta(seconds=settings.NODE_DARK_GRACE_SECONDS), now)
        episode = DarkEpisode.objects.create(
            instance=instance, node_id=node_id, last_heartbeat_at=last, paused_at=paused_at, noticed_at=now,
            deadline=last + timedelta(seconds=settings.NODE_DARK_TIMEOUT_SECONDS))
        episode.credited = billing_port.meters_pause(instance_id=instance.pk, at=paused_at,
                                                     key=f"node_dark:{episode.pk}")
        episode.emailed_at = now if _email(instance, episode) else None
        episode.save(update_fields=["credited", "emailed_at"])
        audit_record(action="instance.node_dark", org=instance.organization, target=instance,
                     details={"episode": str(episode.pk), "last_heartbeat": last.isoformat(),
                              "paused_at": paused_at.isoformat(), "credited": episode.credited,
                              "deadline": episode.deadline.isoformat(), "action": settings.NODE_DARK_ACTION})
    return episode


def dark_follow(*, episode_id) -> str | None:
    """Resume, act on or end one open episode; its outcome, or None while it stays open."""
    released = False
    with transaction.atomic():
        episode = DarkEpisode.objects.filter(pk=episode_id, ended_at__isnull=True).only("instance_id").first()
        if episode is None:
            return None
        instance = instance_lock(instance_id=episode.instance_id)
        episode = DarkEpisode.objects.select_for_update().filter(pk=episode_id, ended_at__isnull=True).first()
        if episode is None:
            return None
        now = db_now()
        if instance.state != S.RUNNING:
            outcome = Outcome.LEFT  # stopped or terminated meanwhile: its meters closed with it
        else:
            groups = _live_groups(instance.pk)
            silent = dark_nodes({g.node_id for g in groups}, silent=True)
            if not silent:
                billing_port.meters_open(instance=instance)  # at the DB now: charged from the resume
                outcome = Outcome.RESUMED
            elif episode.deadline > now:
                return None
            elif (settings.NODE_DARK_ACTION == "move" and instance.kind == InstanceKind.CONTAINER
                  and groups_move(instance, groups, node_ids=set(silent), now=now, reason=DARK_MOVED)):
                outcome = Outcome.MOVED
            else:
                instance_transition(instance=instance, to=S.FAILED, reason=DARK_FAILED, step_deadline=None)
                outcome, released = Outcome.FAILED, True
        episode.ended_at, episode.outcome = now, outcome
        episode.save(update_fields=["ended_at", "outcome"])
        audit_record(action=f"instance.node_dark_{outcome}", org=instance.organization, target=instance,
                     details={"episode": str(episode.pk)})
    if released:
        _release_failed(instance.pk)
        from .sla import sla_dispatch

        sla_dispatch(instance.pk)  # the window was met when it ran: nothing is owed, but settle it as every failure
    return outcome


def groups_move(instance: Instance, groups, *, node_ids, now, reason: str, release_old: bool = False) -> bool:
    """Place the container's groups on `node_ids` again (same zone, same cards per node; a dark node, or one with a
    failed card: services/health_move.py) and go provisioning; False (nothing changed) when one finds no room.
    Call under the instance's lock. A dark node's old container is left to the orphan sweep (reconciler) once its
    agent is back: waiting on a dead agent would hold this lock for the command timeout. `release_old` (a node that
    answers): each old container's release is queued between its group's release and the new placement, so a new
    group landing on the same node and first card (the same container name) finds it queued before its prepare,
    never skipped as "still held". Volumes stay attached."""
    from .quarantine import _place_again

    try:
        with transaction.atomic():
            for group in groups:
                if group.node_id not in node_ids:
                    continue
                cards_release(holder_id=instance.pk, card_ids=group.card_ids)
                NodeGroup.objects.filter(pk=group.pk).update(state=GroupState.RELEASED, released_at=now)
                if release_old and driver_touched(group):
                    group_container_release(group)
                if not _place_again(instance, group):
                    raise _NoRoom
    except _NoRoom:
        return False
    # A move is a start the platform asked for: its own SLA window (compensated if late), at the locked rates.
    event = instance_transition(instance=instance, to=S.PROVISIONING, reason=reason,
                                step_deadline=step_deadline(instance, now), ready_at=None,
                                sla_deadline=now + timedelta(seconds=settings.SLA_SECONDS))
    instance.sla_event_id = event.pk
    instance.save(update_fields=["sla_event_id"])
    instance_dispatch(instance.pk)
    return True


def _release_failed(instance_id) -> None:
    """Free a failed instance's cards. Groups on nodes that answer are stopped through their driver; a dark node's
    container is released by the reconciler's orphan sweep when its agent is back (its heartbeat lists it), so the
    worker does not wait out the command timeout on a dead agent. The reconciler frees the cards if this dies."""
    from .steps import _driver_release, _groups, placement_release_clean

    instance = Instance.objects.get(pk=instance_id)
    groups = _groups(instance_id)
    silent = dark_nodes({g.node_id for g in groups}, silent=True)
    for group in groups:
        if group.node_id in silent or not driver_touched(group):
            continue
        try:
            _driver_release(instance, group)
        except Exception:  # the cards are freed anyway; an orphaned container is swept later
            logger.exception("dark fail: release on a live node failed", extra={"instance": str(instance_id)})
    slurm_partitions.partition_close(instance=instance, groups=groups)
    placement_release_clean(instance=instance)


def _email(instance: Instance, episode: DarkEpisode) -> bool:
    """Tell the instance's creator once, in their language, after commit; False when there is nobody to tell."""
    creator = instance.creator if instance.creator_id else None
    if not getattr(creator, "email", ""):
        return False
    moves = settings.NODE_DARK_ACTION != "fail" and instance.kind == InstanceKind.CONTAINER
    last_seen = f"{episode.last_heartbeat_at:%Y-%m-%d %H:%M:%S} UTC"
    deadline = f"{episode.deadline:%Y-%m-%d %H:%M:%S} UTC"

    def render():
        action = (gettext("moved to other cards (the container starts afresh)") if moves
                  else gettext("failed and its cards released"))
        paid = (gettext("Its monthly package period runs on.") if instance.billing == "monthly"
                else gettext("You are not charged from then until it answers again."))
        return (gettext("Cardmix: instance %(name)s is unreachable") % {"name": instance.name},
                gettext("The machine running your instance %(name)s stopped answering; it was last seen at "
                        "%(last_seen)s.\n\n%(paid)s If it does not answer by %(deadline)s, the instance will be "
                        "%(action)s.\n\n%(url)s") % {
                    "name": instance.name, "last_seen": last_seen, "paid": paid, "deadline": deadline,
                    "action": action, "url": f"{settings.SITE_URL}/instances/{instance.pk}/"})

    return bool(send_to_people([creator], render))
