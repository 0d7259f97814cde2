"""Agent payloads PostgreSQL cannot store (NUL in jsonb) or that are absurdly large are a 400
validation_error, never a 500; a node never stores them."""
import json

import pytest
from rest_framework.test import APIClient

from hardware.models import AgentCommand, NodeCredential
from hardware.services import agent_command_enqueue
from tests.factories.hardware import agent_node

pytestmark = pytest.mark.django_db

HEARTBEAT = {"agent_version": "1.0.0", "hostname": "h", "runtime": "process"}


def node_client(secret):
    client = APIClient(raise_request_exception=False)  # a 500 must show as a 500, not as an exception
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def post_raw(client, url, body: dict):
    return client.post(url, json.dumps(body), content_type="application/json")


def delivered(node, secret):
    cmd = agent_command_enqueue(node_id=node.pk, kind="topology", payload={}, timeout_s=60)
    assert node_client(secret).get("/api/v1/agent/commands/").status_code == 200
    return cmd


def assert_refused(response, field):
    assert response.status_code == 400, (response.status_code, response.content[:300])
    error = response.json()["error"]
    assert error["code"] == "validation_error" and field in error["details"], error


@pytest.mark.parametrize("versions", [{"nv\u0000": "1"}, {"nvidia": "550\u0000"}])
def test_nul_in_driver_versions_is_refused(versions):
    node, secret = agent_node()
    response = post_raw(node_client(secret), "/api/v1/agent/heartbeat/", {**HEARTBEAT, "driver_versions": versions})
    assert_refused(response, "driver_versions")
    assert NodeCredential.objects.get(node=node).last_heartbeat_at is None


@pytest.mark.parametrize("meta", [{"x": "a\u0000b"}, {"a\u0000": 1}, {"deep": [{"k": ["ok", {"n\u0000": "v"}]}]}])
def test_result_meta_with_nul_is_refused_and_a_clean_retry_is_stored(meta):
    node, secret = agent_node()
    cmd = delivered(node, secret)
    url = f"/api/v1/agent/commands/{cmd.pk}/result/"
    assert_refused(post_raw(node_client(secret), url, {"exit_code": 0, "output": "ok", "meta": meta}), "meta")
    ok = post_raw(node_client(secret), url, {"exit_code": 0, "output": "ok", "meta": {"x": "a\ufffdb"}})
    assert ok.status_code == 200
    assert AgentCommand.objects.get(pk=cmd.pk).meta == {"x": "a\ufffdb"}


def test_result_meta_size_and_depth_limits():
    node, secret = agent_node()
    cmd = delivered(node, secret)
    url = f"/api/v1/agent/commands/{cmd.pk}/result/"
    assert_refused(post_raw(node_client(secret), url, {"exit_code": 0, "output": "", "meta": {"x": "y" * 70_000}}),
                   "meta")
    nested: list = []
    for _ in range(40):
        nested = [nested]
    assert_refused(post_raw(node_client(secret), url, {"exit_code": 0, "output": "", "meta": {"x": nested}}), "meta")
    assert AgentCommand.objects.get(pk=cmd.pk).state == "delivered"


@pytest.mark.parametrize("field,value", [
    ("devices", [{"index": 1, "name": "x"}] * 65),
    ("errors", ["e"] * 51),
    ("containers", ["c"] * 1025),
    ("driver_versions", {f"k{i}": "1" for i in range(33)}),
    ("driver_versions", {"k" * 101: "1"}),
])
def test_heartbeat_size_limits(field, value):
    node, secret = agent_node()
    assert_refused(post_raw(node_client(secret), "/api/v1/agent/heartbeat/", {**HEARTBEAT, field: value}), field)


def test_a_normal_heartbeat_still_passes():
    node, secret = agent_node()
    body = {**HEARTBEAT, "devices": [{"index": i, "name": "NVIDIA H100"} for i in range(16)],
            "driver_versions": {"nvidia": "550.90.07", "cuda": "12.4"}, "errors": ["smi slow"],
            "containers": [f"c{i}" for i in range(100)]}
    assert post_raw(node_client(secret), "/api/v1/agent/heartbeat/", body).status_code == 200
    assert NodeCredential.objects.get(node=node).facts["driver_versions"] == {"nvidia": "550.90.07", "cuda": "12.4"}
