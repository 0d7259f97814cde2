"""Node credentials per lease: a bare-metal release revokes the node's token before cleaning is queued; every
agent endpoint then refuses it (401 token_invalid), audits the attempt once per endpoint per minute, and changes
nothing; the fresh OS trades a one-time enrollment secret for a new token, once."""
from datetime import timedelta

import pytest
from django.db import transaction
from rest_framework.test import APIClient

from core.dbclock import db_now
from hardware.enrollment import REFUSED_ACTION, node_enroll_exchange, node_enroll_issue, node_token_revoke
from hardware.models import AgentCommand, NodeCredential, RevokedNodeToken
from hardware.services import agent_command_enqueue, node_token_issue
from inventory.choices import NodeState
from inventory.models import Node
from provisioning.drivers.agent import EXIT_NO_AGENT, AgentDriver
from provisioning.services import cleaning
from provisioning.services.cleaning import node_clean_begin
from provisioning.services.fleet import node_ref
from tenancy.models import AuditEvent
from tests.factories.hardware import agent_node

from ..security.conftest import assert_envelope

pytestmark = pytest.mark.django_db

HEARTBEAT = {"agent_version": "1.3.1", "hostname": "h", "runtime": "process", "devices": []}
RESULT = {"exit_code": 0, "output": "# Avg bus bandwidth    : 999.0\n", "duration_s": 1.0, "meta": {}}


def node_client(secret, ip="203.0.113.7"):
    client = APIClient(REMOTE_ADDR=ip)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def leased_readiness(node, secret):
    """A readiness command the node's agent claimed under a lease and started: what a result would complete."""
    cmd = agent_command_enqueue(node_id=node.pk, kind="readiness", payload={"cards": [0]}, timeout_s=600)
    [claimed] = node_client(secret).get("/api/v1/agent/commands/?limit=1&lease=1").json()["results"]
    assert node_client(secret).post(f"/api/v1/agent/commands/{cmd.pk}/start/", {"lease": claimed["lease"]},
                                    format="json").status_code == 200
    return AgentCommand.objects.get(pk=cmd.pk), claimed["lease"]


def calls(cmd, lease):
    """(endpoint name, method, path, body) of every agent endpoint that takes a node token."""
    return [("agent-heartbeat", "post", "/api/v1/agent/heartbeat/", HEARTBEAT),
            ("agent-commands", "get", "/api/v1/agent/commands/?limit=1&lease=1", None),
            ("agent-command-start", "post", f"/api/v1/agent/commands/{cmd.pk}/start/", {"lease": lease}),
            ("agent-command-result", "post", f"/api/v1/agent/commands/{cmd.pk}/result/", {**RESULT, "lease": lease})]


def call(client, method, path, body):
    return getattr(client, method)(path, body, format="json") if body is not None else getattr(client, method)(path)


def refusals(node):
    return AuditEvent.objects.filter(action=REFUSED_ACTION, target_type="inventory.node", target_id=str(node.pk))


def test_a_bare_metal_release_revokes_the_token_before_cleaning_is_queued(monkeypatch):
    node, secret = agent_node()
    node_client(secret).post("/api/v1/agent/heartbeat/", HEARTBEAT, format="json")
    queued_with = []
    send = cleaning.outbox_send
    monkeypatch.setattr(cleaning, "outbox_send", lambda task, **kw: (
        queued_with.append((task, NodeCredential.objects.get(node=node).token_hash)), send(task, **kw))[1])
    with transaction.atomic():  # as placement_release_clean calls it, in the transaction that ends the lease
        node_clean_begin(node=Node.objects.select_for_update().get(pk=node.pk))
    assert queued_with == [("provisioning.node_clean", None)]  # revoked when the clean was queued
    cred = NodeCredential.objects.get(node=node)
    assert (cred.token_hash, cred.registered_at, cred.heartbeat_deadline) == (None, None, None)
    assert cred.revoked_at is not None
    assert RevokedNodeToken.objects.get(node=node).reason == "bare_metal_release"
    assert AuditEvent.objects.filter(action="node.agent_token_revoke", target_id=str(node.pk)).count() == 1
    assert Node.objects.get(pk=node.pk).state == NodeState.CLEANING
    assert_envelope(node_client(secret).post("/api/v1/agent/heartbeat/", HEARTBEAT, format="json"), 401,
                    "token_invalid")


def test_every_agent_endpoint_refuses_a_revoked_token_audits_it_and_changes_nothing():
    node, secret = agent_node()
    cmd, lease = leased_readiness(node, secret)
    node_client(secret).post("/api/v1/agent/heartbeat/", HEARTBEAT, format="json")
    before = NodeCredential.objects.get(node=node)
    queued = agent_command_enqueue(node_id=node.pk, kind="prepare", payload={"instance_id": "next"}, timeout_s=600)
    assert node_token_revoke(node_id=node.pk)
    for endpoint, method, path, body in calls(cmd, lease):
        answer = call(node_client(secret), method, path, body)
        assert_envelope(answer, 401, "token_invalid")
        event = refusals(node).get(details__endpoint=endpoint)
        assert event.ip == "203.0.113.7" and event.actor is None and event.created_at is not None
        assert event.details["prefix"] == before.prefix and event.details["path"] == path.split("?")[0]
        assert event.details["method"] == method.upper() and event.details["reason"] == "bare_metal_release"
        assert secret not in str(event.details)
    # Nothing moved: the readiness result was not stored, the next tenant's prepare was not handed out, no heartbeat.
    cmd_after = AgentCommand.objects.get(pk=cmd.pk)
    assert (cmd_after.state, cmd_after.output, cmd_after.exit_code) == ("delivered", "", None)
    assert AgentCommand.objects.get(pk=queued.pk).state == "queued"
    assert NodeCredential.objects.get(node=node).last_heartbeat_at == before.last_heartbeat_at


def test_refusals_are_audited_once_per_endpoint_per_minute():
    node, secret = agent_node()
    node_token_revoke(node_id=node.pk)
    for _ in range(5):
        for path in ("/api/v1/agent/commands/", "/api/v1/agent/heartbeat/"):
            client = node_client(secret)
            (client.get(path) if path.endswith("commands/") else client.post(path, HEARTBEAT, format="json"))
    assert sorted(refusals(node).values_list("details__endpoint", flat=True)) == ["agent-commands",
                                                                                  "agent-heartbeat"]
    refusals(node).update(created_at=db_now() - timedelta(seconds=61))  # a minute later: one more each
    for _ in range(3):
        node_client(secret).get("/api/v1/agent/commands/")
    assert refusals(node).filter(details__endpoint="agent-commands").count() == 2
    assert refusals(node).filter(details__endpoint="agent-heartbeat").count() == 1


def test_a_rotated_token_is_refused_and_audited_an_unknown_one_only_refused():
    node, secret = agent_node()
    _, rotated = node_token_issue(node=node)
    assert_envelope(node_client(secret).get("/api/v1/agent/commands/"), 401, "token_invalid")
    assert refusals(node).get().details["reason"] == "rotated"
    assert node_client(rotated).get("/api/v1/agent/commands/").status_code == 200
    count = AuditEvent.objects.count()
    assert_envelope(node_client("cmxn_" + "B" * 43).get("/api/v1/agent/commands/"), 401, "token_invalid")
    assert AuditEvent.objects.count() == count


def test_the_fresh_os_enrolls_once_for_a_new_token():
    node, secret = agent_node()
    assert node_enroll_issue(node_id=node.pk, ttl_s=60) is None  # a valid token: nothing to enroll for
    node_token_revoke(node_id=node.pk)
    enroll = node_enroll_issue(node_id=node.pk, ttl_s=60)
    assert enroll.startswith("cmxe_")
    answer = APIClient().post("/api/v1/agent/enroll/", {"secret": enroll}, format="json")
    assert answer.status_code == 200, answer.json()
    token = answer.json()["token"]
    assert token.startswith("cmxn_") and token != secret and answer.json()["node"]["id"] == str(node.pk)
    cred = NodeCredential.objects.get(node=node)
    assert (cred.revoked_at, cred.enroll_hash, cred.enroll_until) == (None, None, None)
    assert enroll not in str(list(AuditEvent.objects.values_list("details", flat=True)))
    assert node_client(token).post("/api/v1/agent/heartbeat/", HEARTBEAT, format="json").status_code == 200
    assert_envelope(node_client(secret).get("/api/v1/agent/commands/"), 401, "token_invalid")
    # Once: a second exchange (the tenant replaying what it saw, or anyone) gets nothing.
    assert_envelope(APIClient().post("/api/v1/agent/enroll/", {"secret": enroll}, format="json"), 401,
                    "token_invalid")
    assert NodeCredential.objects.get(node=node).token_hash == cred.token_hash


def test_an_expired_or_replaced_enrollment_secret_is_refused():
    node, _ = agent_node()
    node_token_revoke(node_id=node.pk)
    first = node_enroll_issue(node_id=node.pk, ttl_s=60)
    second = node_enroll_issue(node_id=node.pk, ttl_s=60)  # the next boot's: the first one is dead
    assert node_enroll_exchange(secret=first) is None
    NodeCredential.objects.filter(node=node).update(enroll_until=db_now() - timedelta(seconds=1))
    assert node_enroll_exchange(secret=second) is None
    assert_envelope(APIClient().post("/api/v1/agent/enroll/", {"secret": "nope"}, format="json"), 401,
                    "token_invalid")
    assert_envelope(APIClient().post("/api/v1/agent/enroll/", {}, format="json"), 400, "validation_error")
    assert NodeCredential.objects.get(node=node).token_hash is None


def test_an_operators_new_token_ends_the_revocation():
    node, secret = agent_node()
    node_token_revoke(node_id=node.pk)
    node_enroll_issue(node_id=node.pk, ttl_s=60)
    _, fresh = node_token_issue(node=node)
    cred = NodeCredential.objects.get(node=node)
    assert (cred.revoked_at, cred.enroll_hash) == (None, None)
    assert node_client(fresh).get("/api/v1/agent/commands/").status_code == 200
    assert node_client(secret).get("/api/v1/agent/commands/").status_code == 401


def test_the_agent_driver_answers_at_once_for_a_revoked_node():
    """Without a BMC nothing can reimage the node: the clean fails to maintenance with the reason, at once."""
    node, _ = agent_node()
    node_token_revoke(node_id=node.pk)
    out = AgentDriver(timeout_s=30, poll_s=0.05).wipe(node_ref(node))
    assert out.exit_code == EXIT_NO_AGENT and "revoked" in out.text
    assert not AgentCommand.objects.filter(node=node).exists()


def test_a_redfish_deploy_boot_without_a_deploy_path_fails_at_once_and_boots_nothing(sushy_emulator, settings,
                                                                                    tmp_path):
    import sushy

    from provisioning.drivers import get_driver
    from provisioning.drivers.redfish import EXIT_CONFIG
    from tests.factories.hardware import bmc_credential

    bmc_credential(name="bmc-emulator", username=sushy_emulator["username"], password=sushy_emulator["password"])
    system = f"{sushy_emulator['url']}/redfish/v1/Systems/{sushy_emulator['systems'][0]['uuid']}"
    node, _ = agent_node(driver="redfish", hostname="bm-enroll.test", bmc_address=system,
                         bmc_credentials_ref="bmc-emulator")
    node_token_revoke(node_id=node.pk)
    driver = get_driver("redfish", power_timeout_s=10, agent_timeout_s=10, poll_s=0.2)
    settings.NODE_ENROLL_DIR = ""
    out = driver.wipe(node_ref(node))
    assert out.exit_code == EXIT_CONFIG and "NODE_ENROLL_DIR is not set" in out.text, out.text
    root = sushy.Sushy(sushy_emulator["url"], username=sushy_emulator["username"],
                       password=sushy_emulator["password"], verify=False)
    assert root.get_system(system.split(sushy_emulator["url"])[1]).power_state == sushy.PowerState.OFF
    assert NodeCredential.objects.get(node=node).enroll_hash is None  # no secret issued for a boot that never was
