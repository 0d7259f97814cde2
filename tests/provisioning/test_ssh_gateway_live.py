"""The SSH gateway end to end: a real OpenSSH client through `manage.py ssh_gateway` to the instance's real sshd.

The instance is a container of the agent's process runtime whose "container" is Debian's sshd on loopback with
the authorized_keys the agent wrote at prepare (the user's keys and the instance's platform key), as in
tests/clients/test_launch_live.py. The gateway logs into it with the platform key only: the test's own key is one
the instance was not created with, so a command that runs proves the gateway's key did the work.
"""
import json
import os
import shlex
import subprocess
import sys
import textwrap
import time

import pytest
from rest_framework.test import APIClient

from hardware.models import NodeCredential
from provisioning.endpoints import short_id
from provisioning.host_keys import fingerprint, key_line
from provisioning.models import Instance, NodeGroup
from tenancy.models import AuditEvent
from tests.conftest import ROOT, _worker_env
from tests.factories.hardware import agent_node
from tests.factories.inventory import ZoneFactory
from tests.factories.provisioning import funded, wait_for_state
from tests.factories.tenancy import make_token
from tests.hardware.conftest import free_port, start_agent, wait_for  # noqa: F401 (start_agent: a fixture)

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.timeout(300),
              pytest.mark.django_db(transaction=True)]
WORKER_ENV = {"AGENT_COMMAND_POLL_SECONDS": "0.05", "AGENT_COMMAND_TIMEOUT_SECONDS": "60",
              "SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0"}
SSHD = "/usr/sbin/sshd"


class Person:
    """A member with a key pair of their own, registered on the platform through the API."""

    def __init__(self, membership, tmp_path, label):
        self.membership = membership
        self.key = tmp_path / label
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", label, "-f", str(self.key)], check=True)
        self.api = APIClient()
        self.api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(membership)[1]}")
        r = self.api.post("/api/v1/ssh-keys/", {"name": label, "public_key": self.key.with_suffix(".pub").read_text()},
                          format="json")
        assert r.status_code == 201, r.json()
        self.key_id = r.json()["id"]
        # One config for the client and its ProxyJump child alike (-F is passed on; -i is not).
        self.config = tmp_path / f"{label}.config"
        self.config.write_text(textwrap.dedent(f"""\
            Host *
              IdentityFile {self.key}
              IdentitiesOnly yes
              BatchMode yes
              StrictHostKeyChecking no
              UserKnownHostsFile /dev/null
              LogLevel INFO
              ConnectTimeout 20
            """))

    def ssh(self, *args, timeout=60) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", "-F", str(self.config), *args], capture_output=True, text=True, timeout=timeout)

    def popen(self, *args) -> subprocess.Popen:
        return subprocess.Popen(["ssh", "-F", str(self.config), *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)


@pytest.fixture
def start_gateway(tmp_path, transactional_db):
    started = []

    def start(extra_env=None):
        port = free_port()
        env = {**_worker_env("ssh-gateway-unused"), **(extra_env or {})}
        log = open(tmp_path / "gateway.log", "ab")  # noqa: SIM115 - the child writes it until the end
        proc = subprocess.Popen([sys.executable, "manage.py", "ssh_gateway", "--addr", "127.0.0.1", "--port", str(port),
                                 "--host-key", str(tmp_path / "gateway_host_key")], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        started.append(proc)
        proc.log_tail = lambda: (tmp_path / "gateway.log").read_text(errors="replace")[-4000:]
        wait_for(lambda: b"listening" in (tmp_path / "gateway.log").read_bytes() or proc.poll() is not None,
                 timeout=60, what="the gateway")
        assert proc.poll() is None, proc.log_tail()
        proc.port = port
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=20)


def _sshd_container(tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "host")], check=True)
    container = tmp_path / "container.sh"
    container.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        mkdir -p /run/sshd
        exec {SSHD} -D -e -f /dev/null -h {tmp_path / 'host'} -p "$CARDMIX_SSH_PORT" -o ListenAddress=127.0.0.1 \\
          -o AuthorizedKeysFile="$PWD/authorized_keys" -o StrictModes=no -o PermitRootLogin=yes -o UsePAM=no \\
          -o PidFile=none -o PasswordAuthentication=no -o "Subsystem=sftp internal-sftp"
        """))
    container.chmod(0o755)
    return container


@pytest.mark.skipif(not os.path.exists(SSHD) or os.geteuid() != 0, reason="needs openssh-server and root")
def test_openssh_reaches_the_instance_through_the_gateway_and_only_members_who_may_get_in(
        live_server, start_agent, start_worker, start_gateway, member_factory, settings, tmp_path):  # noqa: F811
    base = free_port()
    settings.CONTAINER_SSH_PORT_BASE = base
    zone = ZoneFactory(slug="zone-agent", name="zone-agent")
    node, token = agent_node(hostname="gpu-agent-gateway.test", zone=zone, ssh_host="127.0.0.1")
    agent = start_agent(live_server.url, token, extra_args=("--process-command", str(_sshd_container(tmp_path))))
    wait_for(lambda: NodeCredential.objects.filter(node=node, registered_at__isnull=False).exists(),
             timeout=30, what=f"agent registration\n{agent.log_tail()}")
    worker = start_worker(extra_env={**WORKER_ENV, "CONTAINER_SSH_PORT_BASE": str(base)})
    owner = Person(funded(member_factory(role="owner")), tmp_path, "owner")
    org = owner.membership.organization
    # Created with no SSH key: only the platform's key is on the instance.
    r = owner.api.post("/api/v1/instances/", {"name": "trainer", "kind": "container", "zone": "zone-agent",
                                              "items": [{"accelerator": "h100-sxm-80g", "count": 1}],
                                              "image": "pytorch-2.3-cuda12.3"}, format="json")
    assert r.status_code == 201, r.json()
    inst = wait_for_state(r.json()["id"], "running", timeout=120, worker=worker)
    gateway = start_gateway({"SSH_GATEWAY_RECHECK_SECONDS": "1"})
    settings.SSH_GATEWAY_PUBLIC_HOST, settings.SSH_GATEWAY_PUBLIC_PORT = "127.0.0.1", gateway.port
    at, short = f"127.0.0.1:{gateway.port}", short_id(inst.pk)

    # Both forms the instance body shows, and -J by name, with the owner's registered key.
    shown = owner.api.get(f"/api/v1/instances/{inst.pk}/").json()["ssh_gateway"]
    assert shown["command"] == f"ssh -p {gateway.port} {short}@127.0.0.1", shown
    assert shown["jump"] == f"ssh -J {at} root@i-{short}"
    jump = owner.ssh("-J", at, "root@trainer", "echo ok")
    assert jump.returncode == 0 and jump.stdout == "ok\n", (jump, gateway.log_tail())
    direct = owner.ssh(*shlex.split(shown["command"])[1:], "echo ok; exit 3")
    assert direct.returncode == 3 and direct.stdout == "ok\n", (direct, gateway.log_tail())
    by_short = owner.ssh(*shlex.split(shown["jump"])[1:], "echo ok")
    assert by_short.returncode == 0 and by_short.stdout == "ok\n", by_short
    # A pty of the client's size, and sftp (a subsystem), are bridged too.
    tty = owner.ssh("-tt", "-p", str(gateway.port), f"{short}@127.0.0.1", "tty; stty size")
    assert tty.returncode == 0 and tty.stdout.startswith("/dev/pts/"), tty
    (tmp_path / "payload").write_text("through the gateway\n")
    sftp = subprocess.run(["sftp", "-F", str(owner.config), "-P", str(gateway.port), "-b", "-", f"{short}@127.0.0.1"],
                          input=f"put {tmp_path / 'payload'} {tmp_path / 'uploaded'}\n", capture_output=True,
                          text=True, timeout=60)
    assert sftp.returncode == 0, sftp
    copied = owner.ssh("-p", str(gateway.port), f"{short}@127.0.0.1", f"cat {tmp_path / 'uploaded'}")
    assert copied.stdout == "through the gateway\n", copied
    # `cardmix ssh` runs the gateway form.
    cli = subprocess.run([sys.executable, "-m", "cardmix", "ssh", "trainer", "--json"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "CARDMIX_URL": live_server.url,
                                                     "CARDMIX_TOKEN": make_token(owner.membership)[1]})
    assert cli.returncode == 0 and json.loads(cli.stdout)["argv"] == shlex.split(shown["command"]), cli

    # Another organization's member (with a key of their own) is told there is no such instance.
    stranger = Person(member_factory(role="owner"), tmp_path, "stranger")
    for got in (stranger.ssh("-J", at, "root@trainer", "echo ok"),
                stranger.ssh("-J", at, f"root@i-{short}", "echo ok"),
                stranger.ssh("-p", str(gateway.port), f"{short}@127.0.0.1", "echo ok")):
        assert got.returncode != 0 and "ok" not in got.stdout and "No instance" in got.stderr, got
    # A viewer of the same organization may look, not log in (a member who registered a key, then was made one).
    viewer = Person(member_factory(role="member", org=org), tmp_path, "viewer")
    r = owner.api.patch(f"/api/v1/organizations/current/members/{viewer.membership.pk}/", {"role": "viewer"},
                        format="json")
    assert r.status_code == 200, r.json()
    for got in (viewer.ssh("-J", at, "root@trainer", "echo ok"),
                viewer.ssh("-p", str(gateway.port), f"{short}@127.0.0.1", "echo ok")):
        assert got.returncode != 0 and "ok" not in got.stdout and "role does not allow" in got.stderr, got

    # A revoked key is refused on the next connection, and its open session is closed within the recheck.
    member = Person(member_factory(role="member", org=org), tmp_path, "member")
    held = member.popen("-p", str(gateway.port), f"{short}@127.0.0.1", "echo started; sleep 120")
    assert held.stdout.readline() == "started\n"
    assert member.api.delete(f"/api/v1/ssh-keys/{member.key_id}/").status_code == 204
    assert held.wait(timeout=30) != 0  # closed by the gateway, long before its sleep ends
    refused = member.ssh("-p", str(gateway.port), f"{short}@127.0.0.1", "echo ok")
    assert refused.returncode == 255 and "ok" not in refused.stdout and "Permission denied" in refused.stderr
    # A removed member: the same, through the -J form.
    admin = Person(member_factory(role="admin", org=org), tmp_path, "admin")
    held = admin.popen("-J", at, "root@trainer", "echo started; sleep 120")
    assert held.stdout.readline() == "started\n"
    removed_at = time.monotonic()
    assert owner.api.delete(f"/api/v1/organizations/current/members/{admin.membership.pk}/").status_code == 204
    assert held.wait(timeout=30) != 0 and time.monotonic() - removed_at < 60
    refused = admin.ssh("-J", at, "root@trainer", "echo ok")
    assert refused.returncode != 0 and "ok" not in refused.stdout

    # Every session is in the organization's audit log: who, which instance, from where, how long.
    opened = AuditEvent.objects.filter(organization=org, action="instance.ssh_open", target_id=str(inst.pk))
    assert {(e.actor_id, e.details["form"]) for e in opened} == {
        (owner.membership.user_id, "jump"), (owner.membership.user_id, "user"), (member.membership.user_id, "user"),
        (admin.membership.user_id, "jump")}
    assert all(e.ip == "127.0.0.1" and e.details["key"].startswith("SHA256:") for e in opened)
    closing = AuditEvent.objects.filter(organization=org, action="instance.ssh_close", target_id=str(inst.pk))
    wait_for(lambda: closing.count() == opened.count() == 8, timeout=20, what="a closing row for each session")
    closed = list(closing)
    reasons = {e.actor_id: e.details["reason"] for e in closed if e.actor_id != owner.membership.user_id}
    assert reasons == {member.membership.user_id: "key removed",
                       admin.membership.user_id: "no longer a member who may use the instance"}
    assert all(e.details["seconds"] >= 0 for e in closed)
    assert not AuditEvent.objects.filter(action__startswith="instance.ssh_", organization=stranger.membership
                                         .organization).exists()

    # The ~/.ssh/config block the body shows works as it is: `ssh trainer`.
    (tmp_path / "with-block.config").write_text(shown["config"] + owner.config.read_text())
    block = subprocess.run(["ssh", "-F", str(tmp_path / "with-block.config"), "trainer", "echo ok"],
                           capture_output=True, text=True, timeout=60)
    assert block.returncode == 0 and block.stdout == "ok\n", block
    assert Instance.objects.get(pk=inst.pk).state == "running"

    # The gateway's first connection pinned the instance sshd's host key; another key (the sshd re-reads its
    # key file for each connection) is refused with the reason, and audited with both fingerprints.
    pinned = key_line((tmp_path / "host.pub").read_text())
    assert NodeGroup.objects.live().get(instance=inst).ssh_host_key == pinned
    for name in ("host", "host.pub"):
        (tmp_path / name).unlink()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "host")], check=True)
    swapped = owner.ssh("-p", str(gateway.port), f"{short}@127.0.0.1", "echo ok")
    assert swapped.returncode == 255 and "ok" not in swapped.stdout, swapped
    assert "host key is not the one the platform recorded" in swapped.stderr, swapped
    row = AuditEvent.objects.get(organization=org, action="instance.host_key_mismatch", target_id=str(inst.pk))
    assert row.actor_id == owner.membership.user_id and row.details["via"] == "ssh-gateway"
    assert row.details["expected"] == fingerprint(pinned)
    assert row.details["offered"] == fingerprint(key_line((tmp_path / "host.pub").read_text()))
