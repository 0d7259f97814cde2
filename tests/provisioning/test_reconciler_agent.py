"""The reconciler fails an instance stuck in provisioning on an agent node: its release must reach the
node's agent. Before, the whole pass ran in one transaction, so the release command stayed uncommitted, the
agent never saw it, and the container kept running on cards the platform freed."""
import time
from datetime import timedelta

import pytest

from core.dbclock import db_now
from hardware.models import AgentCommand, NodeCredential
from hardware.services import (
    agent_command_complete,
    agent_command_enqueue,
    agent_commands_claim,
    node_token_issue,
)
from inventory.models import CardAllocation, Node
from provisioning.models import Instance, NodeGroup
from provisioning.services.reconciler import reconcile
from tests.factories.provisioning import container_body, make_fleet
from tests.races import Aside

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_the_reconcilers_release_reaches_the_agent(client, settings):
    settings.AGENT_COMMAND_TIMEOUT_SECONDS = 20
    settings.AGENT_COMMAND_POLL_SECONDS = 0.05
    make_fleet(h100=1)
    node = Node.objects.get()
    Node.objects.filter(pk=node.pk).update(driver="agent")
    node_token_issue(node=node)
    r = client.post("/api/v1/instances/", container_body("h100-sxm-80g", 4), format="json")
    assert r.status_code == 201, r.json()
    iid = r.json()["id"]
    # The worker died inside the prepare after the agent took it (a container may be starting); the
    # redelivery is used up.
    group = NodeGroup.objects.get(instance_id=iid)
    agent_command_enqueue(node_id=node.pk, kind="prepare", timeout_s=60, payload={
        "kind": "container", "cards": group.card_indices, "instance_id": iid, "name": f"cardmix-{iid}-0"})
    cred = NodeCredential.objects.get(node=node)
    assert [c.kind for c in agent_commands_claim(credential=cred)] == ["prepare"]
    NodeGroup.objects.filter(pk=group.pk).update(prepare_started_at=db_now())
    Instance.objects.filter(pk=iid).update(step_retries=1, step_deadline=db_now() - timedelta(hours=1))
    seen = []

    def agent_polls():  # the node's agent, on its own connection, answering what it is given
        give_up = time.monotonic() + 15
        while time.monotonic() < give_up and not seen:
            for cmd in agent_commands_claim(credential=cred):
                seen.append((cmd.kind, cmd.payload.get("name")))
                agent_command_complete(credential=cred, command_id=cmd.pk, exit_code=0, output="removed\n")
            time.sleep(0.05)

    agent = Aside(agent_polls)
    stats = reconcile()
    agent.result(20)
    assert stats["failed"] == 1
    assert seen == [("release", f"cardmix-{iid}-0")]
    assert AgentCommand.objects.get(kind="release").state == "done"
    assert Instance.objects.get(pk=iid).state == "failed"
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()
