"""Containers an agent still runs although no live node group holds them.

A release that failed on the node (`docker rm` refused) or that the platform stopped waiting for (a dead
agent) frees the cards anyway; the container keeps its GPUs and its SSH port. Agents list their containers
in every heartbeat (`NodeCredential.facts["containers"]`, named `cardmix-<instance>-<first card>`), so the
reconciler queues a release for each one no live group explains — again every ORPHAN_RETRY while the
agent keeps listing it. Nobody waits on these commands: the next heartbeat shows what they did.
"""
import logging
import re
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from core.dbclock import db_now
from hardware.models import AgentCommand, NodeCredential
from hardware.services import agent_command_enqueue
from inventory.models import Card

from ..models import NodeGroup

logger = logging.getLogger("cardmix.provisioning")

CONTAINER_NAME = re.compile(r"cardmix-(?P<instance>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
                            r"-(?P<card>\d{1,2})")
ORPHAN_RETRY = timedelta(minutes=10)


def _listed(facts) -> dict[str, tuple[uuid.UUID, int]]:
    """{container name: (instance id, first card)} of the group containers in a heartbeat's facts."""
    names = facts.get("containers") if isinstance(facts, dict) else None
    found = {}
    for name in names if isinstance(names, list) else []:
        match = CONTAINER_NAME.fullmatch(str(name))
        if match:
            found[name] = (uuid.UUID(match["instance"]), int(match["card"]))
    return found


def containers_orphaned_release() -> int:
    """Queue a release for every listed container without a live group; returns how many were queued."""
    now = db_now()
    fresh = now - timedelta(seconds=settings.AGENT_HEARTBEAT_TIMEOUT_SECONDS)
    queued = 0
    for node_id, facts in (NodeCredential.objects.filter(last_heartbeat_at__gte=fresh)
                           .values_list("node_id", "facts")):
        listed = _listed(facts)
        if not listed:
            continue
        live = _live_first_cards(node_id, [i for i, _ in listed.values()])
        orphans = {name: where for name, where in listed.items() if where not in live}
        if not orphans:
            continue
        recent = set(AgentCommand.objects.filter(node_id=node_id, kind="release", created_at__gte=now - ORPHAN_RETRY,
                                                 payload__name__in=list(orphans))
                     .values_list("payload__name", flat=True))
        for name, (instance_id, card) in sorted(orphans.items()):
            if name not in recent and _release_if_still_orphaned(node_id, name, instance_id, card):
                queued += 1
    return queued


def group_container_release(group: NodeGroup) -> bool:
    """Queue the release of a released group's container on its (answering) node now, not at the next sweep: a
    move places the instance again, maybe on the same node. Nobody waits on it; the agent runs it before the new
    group's prepare, which is queued later."""
    if not group.card_indices:
        return False
    card = min(group.card_indices)
    return _release_if_still_orphaned(group.node_id, f"cardmix-{group.instance_id}-{card}", group.instance_id, card)


def _live_first_cards(node_id, instance_ids) -> set[tuple[uuid.UUID, int]]:
    return {(g.instance_id, min(g.card_indices)) for g in NodeGroup.objects.live().filter(
        node_id=node_id, instance_id__in=set(instance_ids))
        .only("instance_id", "card_indices") if g.card_indices}


def _release_if_still_orphaned(node_id, name: str, instance_id: uuid.UUID, card: int) -> bool:
    """Queue the release under the row lock of the container's first card. A claim locks its cards before it
    creates a group, so a start placing the instance on this card again either committed (its group is seen
    here: nothing queued) or waits, and its prepare is queued after this release: the agent, which runs
    commands oldest first, never removes the new container that has this name."""
    with transaction.atomic():
        Card.objects.select_for_update(of=("self",)).filter(node_id=node_id, index=card).first()
        if (instance_id, card) in _live_first_cards(node_id, [instance_id]):
            return False
        agent_command_enqueue(node_id=node_id, kind="release", timeout_s=settings.AGENT_COMMAND_TIMEOUT_SECONDS,
                              payload={"cards": [card], "instance_id": str(instance_id), "name": name})
    logger.warning("reconciler: released a container no live group holds",
                   extra={"node": str(node_id), "container": name})
    return True
