"""An orphan release is queued under the row lock of the container's first card, which a claim takes too
before it creates its group. A start placing the instance back on that card while the reconciler looks gets no
release queued behind its prepare: the release goes by name, and the new container has the old one's name."""
import threading

import pytest
from django.db import transaction

from hardware.models import AgentCommand
from inventory.lock_objects import cards_lock
from inventory.models import Card
from provisioning.models import NodeGroup
from provisioning.services.orphans import containers_orphaned_release
from tests.factories.hardware import agent_node
from tests.factories.provisioning import InstanceFactory
from tests.provisioning.test_orphan_containers import _heartbeat
from tests.races import Aside

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_a_claim_in_flight_on_the_container_s_card_gets_no_release_queued(owner):
    node, _ = agent_node()
    inst = InstanceFactory(organization=owner.organization, state="starting")
    _heartbeat(node, [f"cardmix-{inst.pk}-0"])  # its old container, still listed: no live group yet
    cards = list(Card.objects.filter(node=node, index__in=[0, 1]).order_by("pk").values_list("pk", flat=True))
    locked, go = threading.Event(), threading.Event()

    def claim():  # as placement_claim: lock the cards, then create the group, then commit
        with transaction.atomic():
            cards_lock(cards)
            locked.set()
            assert go.wait(10)
            NodeGroup.objects.create(instance=inst, item_index=0, accelerator=node.accelerator.slug, node=node,
                                     card_indices=[0, 1], card_ids=cards, state="placed")

    claimer = Aside(claim)
    assert locked.wait(10)
    reconciler = Aside(containers_orphaned_release)
    assert reconciler.running(0.5)  # waits for the card's lock instead of queuing a release now
    go.set()
    claimer.result()
    assert reconciler.result() == 0
    assert not AgentCommand.objects.filter(node=node, kind="release").exists()
