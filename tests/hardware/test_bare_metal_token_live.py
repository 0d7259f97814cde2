"""Node credentials per lease, end to end: a bare-metal instance on a Redfish node (sushy-emulator --fake),
the API, a real Celery worker and real agent processes against the live test server.

Tenant 1 is root on the node and keeps its agent (with the node token it could read) running after the
lease, as a hostile tenant would. The release revokes that token; cleaning boots the deploy image, whose agent
(a fresh process, empty state) finds the one-time enrollment secret the platform delivered on its deploy kernel
command line and trades it for a new token. The old token is then refused on every agent endpoint (401,
audited, once per endpoint per minute) and a readiness result posted with it changes nothing; the next
tenant's instance reaches `running` through the new token only (read by the next OS from the token file
the deploy image wrote)."""
import json
import stat
import time
import urllib.error
import urllib.request

import pytest

from hardware.enrollment import REFUSED_ACTION
from hardware.models import AgentCommand, NodeCredential, RevokedNodeToken
from hardware.tokens import node_token_hash
from inventory.choices import NodeState
from inventory.models import Node
from provisioning.models import ReadinessReport
from tenancy.models import AuditEvent
from tests.factories.hardware import agent_node, bmc_credential
from tests.factories.inventory import ZoneFactory
from tests.factories.provisioning import container_body, funded, wait_for_state

from .conftest import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.timeout(420),
              pytest.mark.django_db(transaction=True)]
URL = "/api/v1/instances/"
HOSTNAME = "bm-node-31.test"


def agent_call(server, token, method, path, body=None):
    """One HTTP request to an agent endpoint with `token`, as an agent (or a tenant holding its token) sends it."""
    req = urllib.request.Request(f"{server}/api/v1/agent/{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def refused(node, endpoint=None):
    events = AuditEvent.objects.filter(action=REFUSED_ACTION, target_id=str(node.pk))
    return events.filter(details__endpoint=endpoint) if endpoint else events


def test_after_a_bare_metal_release_the_old_token_is_dead_and_the_next_instance_runs_on_a_new_one(
        live_server, sushy_emulator, start_agent, start_worker, member_factory, session_client_for, tmp_path):
    began = time.monotonic()
    bmc_credential(name="bmc-emulator", username=sushy_emulator["username"], password=sushy_emulator["password"])
    zone = ZoneFactory(slug="zone-bm", name="zone-bm")
    system = sushy_emulator["systems"][0]["uuid"]
    node, old_token = agent_node(driver="redfish", hostname=HOSTNAME, zone=zone, bmc_credentials_ref="bmc-emulator",
                                 bmc_address=f"{sushy_emulator['url']}/redfish/v1/Systems/{system}")
    enroll_dir = tmp_path / "boot-server"
    worker = start_worker(extra_env={
        "AGENT_COMMAND_POLL_SECONDS": "0.05", "AGENT_COMMAND_TIMEOUT_SECONDS": "60",
        "REDFISH_POWER_TIMEOUT_SECONDS": "30", "REDFISH_AGENT_TIMEOUT_SECONDS": "60",
        "NODE_ENROLL_DIR": str(enroll_dir), "SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0"})
    client = session_client_for(funded(member_factory(role="owner")))
    body = {**container_body("h100-sxm-80g", 8, zone="zone-bm"), "kind": "bare_metal"}

    # Tenant 1's lease: the OS it is root on runs the agent with the node token.
    tenant_agent = start_agent(live_server.url, old_token, name="tenant-os")
    r = client.post(URL, body, format="json")
    assert r.status_code == 201, r.json()
    first = r.json()["id"]
    wait_for_state(first, "running", timeout=120, worker=worker)
    first_readiness = AgentCommand.objects.get(node=node, kind="readiness", payload__cards=list(range(8)))
    report = ReadinessReport.objects.get(instance_id=first)
    assert report.passed

    # The release: the token is revoked, cleaning boots the deploy image with an enrollment secret for it.
    # The tenant's agent keeps going with the old token (heartbeats and polls, refused from now on).
    assert client.delete(f"{URL}{first}/").status_code == 202
    wait_for_state(first, "terminated", timeout=120, worker=worker)
    assert RevokedNodeToken.objects.filter(node=node, token_hash=node_token_hash(old_token),
                                           reason="bare_metal_release").exists()
    enroll_file = enroll_dir / HOSTNAME
    line = wait_for(lambda: enroll_file.exists() and enroll_file.read_text().strip(), timeout=60,
                    what=f"the enrollment secret on the deploy path\n{worker.log_tail()}")
    assert stat.S_IMODE(enroll_file.stat().st_mode) == 0o600
    cmdline = tmp_path / "deploy-cmdline"
    cmdline.write_text(f"BOOT_IMAGE=/cardmix-deploy/vmlinuz ip=dhcp {line}\n")  # as the boot server renders it
    disk_token = tmp_path / "node-disk" / "etc-cardmix-agent" / "token"  # where the next OS reads its token
    deploy_agent = start_agent(live_server.url, "", name="deploy-image", extra_args=(
        "--token-file", str(disk_token), "--kernel-cmdline", str(cmdline)))
    wait_for(lambda: Node.objects.get(pk=node.pk).state == NodeState.AVAILABLE, timeout=120, interval=0.3,
             what=f"cleaning to finish\n{worker.log_tail()}\n{deploy_agent.log_tail()}")
    wipe = AgentCommand.objects.get(node=node, kind="wipe")
    assert wipe.state == "done" and wipe.exit_code == 0, wipe.output
    assert not enroll_file.exists()  # the secret left the deploy path with the boot
    new_token = disk_token.read_text().strip()
    assert new_token.startswith("cmxn_") and new_token != old_token
    assert stat.S_IMODE(disk_token.stat().st_mode) == 0o600
    cred = NodeCredential.objects.get(node=node)
    assert cred.token_hash == node_token_hash(new_token) and cred.revoked_at is None
    secret = line.removeprefix("cardmix.enroll=")
    replay = urllib.request.Request(f"{live_server.url}/api/v1/agent/enroll/", method="POST",
                                    data=json.dumps({"secret": secret}).encode(),
                                    headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as exc:  # once only
        urllib.request.urlopen(replay, timeout=10)
    assert exc.value.code == 401

    # The old token on every agent endpoint: 401 token_invalid, audited with the node, endpoint, IP and time.
    cmd = first_readiness.pk
    calls = {"agent-heartbeat": ("POST", "heartbeat/", {"agent_version": "9", "runtime": "process"}),
             "agent-commands": ("GET", "commands/?limit=1&lease=1", None),
             "agent-command-start": ("POST", f"commands/{cmd}/start/", {"lease": None}),
             # A failing readiness result, posted with the old token for the node's readiness command.
             "agent-command-result": ("POST", f"commands/{cmd}/result/",
                                      {"exit_code": 1, "output": "# Avg bus bandwidth    : 1.0\n", "meta": {}})}
    for endpoint, (method, path, payload) in calls.items():
        status, answer = agent_call(live_server.url, old_token, method, path, payload)
        assert (status, answer["error"]["code"]) == (401, "token_invalid"), (endpoint, answer)
        event = refused(node, endpoint).order_by("created_at").first()
        assert event is not None, endpoint
        assert event.ip == "127.0.0.1" and event.created_at is not None
        assert event.details["prefix"] == old_token[:13] and event.details["reason"] == "bare_metal_release"
    after = AgentCommand.objects.get(pk=cmd)
    assert (after.exit_code, after.output, after.meta) == (first_readiness.exit_code, first_readiness.output,
                                                           first_readiness.meta)
    assert ReadinessReport.objects.get(pk=report.pk).passed
    assert "401" in tenant_agent.log_tail(20000)  # it kept trying all along

    # The next tenant: the node's next OS reads the token the deploy image wrote; no enrollment, no old token.
    deploy_agent.stop()
    next_os = start_agent(live_server.url, "", name="next-os", extra_args=("--token-file", str(disk_token)))
    r = client.post(URL, body, format="json")
    assert r.status_code == 201, r.json()
    second = r.json()["id"]
    wait_for_state(second, "running", timeout=120, worker=worker)
    kinds = dict(AgentCommand.objects.filter(node=node, payload__instance_id=second).values_list("kind", "state"))
    assert kinds == {"prepare": "done"}, kinds
    assert ReadinessReport.objects.get(instance_id=second).passed
    assert NodeCredential.objects.get(node=node).token_hash == node_token_hash(new_token)  # no other token since
    assert not refused(node).filter(details__prefix=new_token[:13]).exists()
    assert "enrolled" not in next_os.log_tail(20000)
    assert tenant_agent.proc.poll() is None  # the tenant's agent was running, refused, the whole time

    # Audited without flooding: the tenant's agent polled every 0.1 s and beat every 0.3 s all along.
    minutes = (time.monotonic() - began) / 60
    for endpoint in ("agent-heartbeat", "agent-commands"):
        assert 1 <= refused(node, endpoint).count() <= int(minutes) + 2, endpoint
