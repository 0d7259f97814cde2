"""The agent endpoints: node tokens only, one node's commands only, validation, query counts."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from hardware.models import AgentCommand, NodeCredential
from hardware.services import agent_command_enqueue, node_token_issue
from tenancy.models import AuditEvent
from tests.factories.hardware import agent_node

pytestmark = pytest.mark.django_db

HEARTBEAT = {"agent_version": "1.0.0", "hostname": "h", "runtime": "process",
             "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0"}]}


def node_client(secret):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def test_token_issued_once_hashed_and_rotatable():
    node, secret = agent_node()
    cred = NodeCredential.objects.get(node=node)
    assert secret.startswith("cmxn_") and len(secret) > 40
    assert secret not in (cred.token_hash, cred.prefix) and secret.startswith(cred.prefix)
    assert node_client(secret).post("/api/v1/agent/heartbeat/", HEARTBEAT, format="json").status_code == 200
    _, rotated = node_token_issue(node=node)
    assert node_client(secret).post("/api/v1/agent/heartbeat/", HEARTBEAT, format="json").status_code == 401
    assert node_client(rotated).post("/api/v1/agent/heartbeat/", HEARTBEAT, format="json").status_code == 200
    actions = list(AuditEvent.objects.filter(target_id=str(node.pk)).values_list("action", flat=True))
    assert "node.agent_token_issue" in actions and "node.agent_token_rotate" in actions
    assert not AuditEvent.objects.filter(details__icontains=secret).exists()


def test_forged_and_user_tokens_and_sessions_are_refused(member_factory, session_client_for, token_client_for):
    agent_node()
    forged = node_client("cmxn_" + "A" * 43).post("/api/v1/agent/heartbeat/", HEARTBEAT, format="json")
    assert forged.status_code == 401 and forged.json()["error"]["code"] == "token_invalid"
    membership = member_factory(role="owner")
    user_token = token_client_for(membership).get("/api/v1/agent/commands/")
    assert user_token.status_code == 401 and user_token.json()["error"]["code"] == "token_invalid"
    session = session_client_for(membership).get("/api/v1/agent/commands/")
    assert session.status_code == 401 and session.json()["error"]["code"] == "not_authenticated"
    assert APIClient().get("/api/v1/agent/commands/").status_code == 401


def test_node_tokens_are_refused_everywhere_else():
    _, secret = agent_node()
    for path in ("/api/v1/accelerators/", "/api/v1/instances/", "/api/v1/organizations/current/"):
        response = node_client(secret).get(path)
        assert response.status_code == 401, path
        assert response.json()["error"]["code"] == "token_invalid"


def test_a_node_sees_and_answers_only_its_own_commands():
    node_a, secret_a = agent_node()
    node_b, secret_b = agent_node()
    cmd = agent_command_enqueue(node_id=node_a.pk, kind="topology", payload={"collective": "nccl"}, timeout_s=60)
    assert node_client(secret_b).get("/api/v1/agent/commands/").json()["results"] == []
    foreign = node_client(secret_b).post(f"/api/v1/agent/commands/{cmd.pk}/result/",
                                         {"exit_code": 0, "output": "forged"}, format="json")
    assert foreign.status_code == 404 and foreign.json()["error"]["code"] == "not_found"
    mine = node_client(secret_a).get("/api/v1/agent/commands/").json()["results"]
    assert [c["id"] for c in mine] == [str(cmd.pk)] and mine[0]["kind"] == "topology"
    assert node_client(secret_a).get("/api/v1/agent/commands/").json()["results"] == []  # delivered once
    done = node_client(secret_a).post(f"/api/v1/agent/commands/{cmd.pk}/result/",
                                      {"exit_code": 0, "output": "\tGPU0\nGPU0\t X\n"}, format="json")
    assert done.status_code == 200 and done.json()["state"] == "done"
    again = node_client(secret_a).post(f"/api/v1/agent/commands/{cmd.pk}/result/",
                                       {"exit_code": 3, "output": "later"}, format="json")
    assert again.status_code == 200
    cmd.refresh_from_db()
    assert (cmd.exit_code, cmd.output) == (0, "\tGPU0\nGPU0\t X\n")  # the first result stands


def test_expired_command_refuses_a_late_result():
    node, secret = agent_node()
    cmd = agent_command_enqueue(node_id=node.pk, kind="wipe", payload={}, timeout_s=60)
    AgentCommand.objects.filter(pk=cmd.pk).update(state="expired")
    late = node_client(secret).post(f"/api/v1/agent/commands/{cmd.pk}/result/", {"exit_code": 0, "output": ""},
                                    format="json")
    assert late.status_code == 409 and late.json()["error"]["code"] == "invalid_state"


def test_bad_input_is_a_validation_error():
    node, secret = agent_node()
    bad = node_client(secret).post("/api/v1/agent/heartbeat/", {"runtime": "vm", "devices": [{"index": -1}]},
                                   format="json")
    assert bad.status_code == 400
    details = bad.json()["error"]["details"]
    assert bad.json()["error"]["code"] == "validation_error"
    assert {"agent_version", "hostname", "runtime", "devices"} <= set(details)
    cmd = agent_command_enqueue(node_id=node.pk, kind="wipe", payload={}, timeout_s=60)
    bad_result = node_client(secret).post(f"/api/v1/agent/commands/{cmd.pk}/result/",
                                          {"exit_code": "x"}, format="json")
    assert bad_result.status_code == 400
    assert set(bad_result.json()["error"]["details"]) == {"exit_code", "output"}


@pytest.mark.parametrize("count", [2, 50])
def test_command_poll_query_count_does_not_grow(count):
    node, secret = agent_node()
    for _ in range(count):
        agent_command_enqueue(node_id=node.pk, kind="topology", payload={}, timeout_s=60)
    client = node_client(secret)
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/api/v1/agent/commands/")
    assert len(response.json()["results"]) == min(count, 10)
    # auth (1) + savepoint / the node's claim lock / lapsed leases back / select-for-update / update / release in one
    # transaction: constant in the number of rows
    assert len(queries) <= 7, [q["sql"] for q in queries]
    test_command_poll_query_count_does_not_grow.seen = getattr(test_command_poll_query_count_does_not_grow,
                                                               "seen", set()) | {len(queries)}
    assert len(test_command_poll_query_count_does_not_grow.seen) == 1


def test_an_agent_may_claim_fewer_commands_and_the_rest_stay_queued():
    node, secret = agent_node()
    cmds = [agent_command_enqueue(node_id=node.pk, kind="topology", payload={}, timeout_s=60) for _ in range(12)]
    client = node_client(secret)
    first = client.get("/api/v1/agent/commands/?limit=1").json()["results"]
    assert [c["id"] for c in first] == [str(cmds[0].pk)]  # before: all ten, each one then delivered
    assert list(AgentCommand.objects.order_by("created_at").values_list("state", flat=True)) == (
        ["delivered"] + ["queued"] * 11)
    assert len(client.get("/api/v1/agent/commands/?limit=50").json()["results"]) == 10  # never more than ten
    assert len(client.get("/api/v1/agent/commands/?limit=x").json()["results"]) == 1  # ignored: the default
    assert AgentCommand.objects.filter(state="queued").count() == 0


def test_an_agent_that_sends_no_limit_gets_up_to_ten_as_before():
    node, secret = agent_node()
    for _ in range(11):
        agent_command_enqueue(node_id=node.pk, kind="topology", payload={}, timeout_s=60)
    assert len(node_client(secret).get("/api/v1/agent/commands/").json()["results"]) == 10
    assert node_client(secret).get("/api/v1/agent/commands/?limit=0").json()["results"] != []  # at least one
