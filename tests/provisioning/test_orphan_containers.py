"""Containers an agent still lists although no live group holds them (a failed or abandoned release) get a
release queued by the reconciler, once per retry period; live containers and silent agents are left alone."""
import uuid
from datetime import timedelta

import pytest

from core.dbclock import db_now
from hardware.models import AgentCommand, NodeCredential
from provisioning.models import NodeGroup
from provisioning.services.orphans import containers_orphaned_release
from provisioning.services.reconciler import reconcile
from tests.factories.hardware import agent_node
from tests.factories.provisioning import InstanceFactory

pytestmark = pytest.mark.django_db


def _group(instance, node, cards, released=False):
    return NodeGroup.objects.create(instance=instance, item_index=0, accelerator=node.accelerator.slug, node=node,
                                    card_indices=cards, card_ids=[], state="checked",
                                    released_at=db_now() if released else None)


def _heartbeat(node, containers, at=None):
    NodeCredential.objects.filter(node=node).update(last_heartbeat_at=at or db_now(),
                                                    facts={"containers": containers})


def _releases(node) -> dict:
    return {c.payload["name"]: c.payload for c in AgentCommand.objects.filter(node=node, kind="release")}


def test_a_container_no_live_group_holds_is_released_and_a_live_one_is_not(owner):
    node, _ = agent_node()
    running = InstanceFactory(organization=owner.organization, state="running")
    _group(running, node, [0, 1])
    ended = InstanceFactory(organization=owner.organization, state="terminated")
    _group(ended, node, [2, 3], released=True)  # its release failed on the node: still listed
    unknown = uuid.uuid4()  # e.g. a row deleted since
    _heartbeat(node, [f"cardmix-{running.pk}-0", f"cardmix-{ended.pk}-2", f"cardmix-{unknown}-4",
                      str(running.pk), "cardmix-not-a-uuid-1", f"cardmix-{running.pk}-6"])
    assert reconcile()["containers_released"] == 3
    assert _releases(node) == {
        f"cardmix-{ended.pk}-2": {"cards": [2], "instance_id": str(ended.pk), "name": f"cardmix-{ended.pk}-2"},
        f"cardmix-{unknown}-4": {"cards": [4], "instance_id": str(unknown), "name": f"cardmix-{unknown}-4"},
        # the live instance's group starts at card 0: a container of it on card 6 is not that group's
        f"cardmix-{running.pk}-6": {"cards": [6], "instance_id": str(running.pk), "name": f"cardmix-{running.pk}-6"},
    }


def test_one_release_per_retry_period_while_the_agent_keeps_listing_it(owner):
    node, _ = agent_node()
    ended = InstanceFactory(organization=owner.organization, state="terminated")
    _heartbeat(node, [f"cardmix-{ended.pk}-0"])
    assert containers_orphaned_release() == 1
    assert containers_orphaned_release() == 0  # the first release has not had its chance yet
    AgentCommand.objects.filter(kind="release").update(created_at=db_now() - timedelta(minutes=11))
    assert containers_orphaned_release() == 1  # still listed ten minutes later: try again
    assert AgentCommand.objects.filter(kind="release").count() == 2


def test_an_agent_that_went_silent_is_not_sent_releases(owner):
    node, _ = agent_node()
    ended = InstanceFactory(organization=owner.organization, state="terminated")
    _heartbeat(node, [f"cardmix-{ended.pk}-0"], at=db_now() - timedelta(hours=1))
    assert containers_orphaned_release() == 0
