"""A warm bare-metal node's hand-over, end to end: the built agent as a process (docker runtime, the fake
CLI) whose root's authorized_keys sits in a temporary dir that a real Debian sshd on loopback reads, the live server,
a real Celery worker and a warm pool of one.

The pool deploys the node before any tenant is known (no keys), so before the hand-over existed the customer could
not log in. Now the worker's hand-over has the agent write the instance's keys (the user's and the platform's): the
customer's own key opens a root shell on the node; the release takes the keys away and gives the operator's file back.
The agent's own part (atomic write, refusals) is in test_agent_resilience.py."""
import os
import subprocess
import textwrap

import pytest

from hardware.models import AgentCommand, NodeCredential
from inventory.models import Image
from provisioning.models import NodeGroup, WarmPool
from provisioning.platform_keys import authorized_keys
from provisioning.services.warm_pool import warm_pool_status
from provisioning.tasks import warm_pools_refill_task
from tests.factories.hardware import agent_node
from tests.factories.inventory import ZoneFactory
from tests.factories.provisioning import container_body, funded, wait_for_state
from tests.factories.tenancy import SshKeyFactory

from .conftest import BIN, free_port, stop_process, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.timeout(300),
              pytest.mark.django_db(transaction=True)]
URL = "/api/v1/instances/"
SSHD = "/usr/sbin/sshd"
WORKER_ENV = {"AGENT_COMMAND_POLL_SECONDS": "0.05", "AGENT_COMMAND_TIMEOUT_SECONDS": "60",
              "SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0"}


def key_pair(tmp_path, label):
    path = tmp_path / label
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", label, "-f", str(path)], check=True)
    return path, path.with_suffix(".pub").read_text().strip()


def start_sshd(tmp_path, root_keys, port) -> subprocess.Popen:
    """Debian's sshd on loopback, reading root's authorized_keys where the agent writes it."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "host")], check=True)
    os.makedirs("/run/sshd", exist_ok=True)
    log = open(tmp_path / "sshd.log", "ab")  # noqa: SIM115 - the child writes it until the end
    return subprocess.Popen([SSHD, "-D", "-e", "-f", "/dev/null", "-h", str(tmp_path / "host"), "-p", str(port),
                             "-o", "ListenAddress=127.0.0.1", "-o", f"AuthorizedKeysFile={root_keys}",
                             "-o", "StrictModes=no", "-o", "PermitRootLogin=yes", "-o", "UsePAM=no",
                             "-o", "PidFile=none", "-o", "PasswordAuthentication=no"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def login(key, port) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                           "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                           "-o", "ConnectTimeout=20", "-p", str(port), "root@127.0.0.1", "echo in-as-$(id -un)"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not os.path.exists(SSHD) or os.geteuid() != 0, reason="needs openssh-server and root")
def test_a_warm_node_handed_over_takes_the_customers_key_and_its_release_gives_the_operators_back(
        live_server, start_agent, start_worker, member_factory, session_client_for, tmp_path):
    zone = ZoneFactory(slug="zone-warm-keys", name="zone-warm-keys")
    node, token = agent_node(hostname="bm-warm-keys.test", zone=zone)
    operator_key, operator_pub = key_pair(tmp_path, "operator")
    root_keys = tmp_path / "root" / ".ssh" / "authorized_keys"
    root_keys.parent.mkdir(parents=True, mode=0o700)
    root_keys.write_text(textwrap.dedent(f"""\
        # the operator's own
        {operator_pub}
        """))
    operators = root_keys.read_bytes()
    (tmp_path / "docker").mkdir()
    agent = start_agent(live_server.url, token,
                        extra_env={"CARDMIX_FAKE_DOCKER_STATE": str(tmp_path / "docker" / "containers.json")},
                        extra_args=("--runtime", "docker", "--docker", str(BIN / "docker"),
                                    "--authorized-keys", str(root_keys)))
    wait_for(lambda: NodeCredential.objects.filter(node=node, registered_at__isnull=False).exists(), timeout=30,
             what=f"agent registration\n{agent.log_tail()}")
    port = free_port()
    sshd = start_sshd(tmp_path, root_keys, port)
    try:
        wait_for(lambda: login(operator_key, port).returncode == 0, timeout=30,
                 what=f"sshd\n{(tmp_path / 'sshd.log').read_text(errors='replace')}")
        owner = funded(member_factory(role="owner"))
        customer_key, customer_pub = key_pair(tmp_path, "customer")
        registered = SshKeyFactory(user=owner.user, public_key=customer_pub)
        worker = start_worker(extra_env=WORKER_ENV)
        pool = WarmPool.objects.create(zone=zone, accelerator=node.accelerator, size=1,
                                       image=Image.objects.get(slug="pytorch-2.3-cuda12.3"))
        warm_pools_refill_task.delay()
        wait_for(lambda: warm_pool_status(pool)[0] == 1, timeout=120,
                 what=f"a warm node\n{worker.log_tail()}\n{agent.log_tail()}")
        # Deployed for nobody: no tenant's key opens it (the operator's file is saved, for the release to restore).
        assert login(customer_key, port).returncode == 255

        client = session_client_for(owner)
        body = {**container_body("h100-sxm-80g", 8, zone="zone-warm-keys"), "kind": "bare_metal",
                "ssh_key_ids": [str(registered.pk)]}
        r = client.post(URL, body, format="json")
        assert r.status_code == 201, r.json()
        iid = r.json()["id"]
        instance = wait_for_state(iid, "running", timeout=120, worker=worker)
        group = NodeGroup.objects.get(instance_id=iid)
        assert group.warm and group.prepare_attempts == 0 and group.keys_installed_at is not None
        [install] = AgentCommand.objects.filter(node=node, kind="install_keys")
        assert install.payload == {"instance_id": iid, "ssh_keys": authorized_keys(instance)}
        assert install.exit_code == 0 and f"2 ssh key(s) of {iid} in {root_keys}" in install.output
        # The hand-over reached the node: root's authorized_keys holds the customer's key and the platform's.
        assert root_keys.read_text() == "".join(k + "\n" for k in authorized_keys(instance))
        assert root_keys.stat().st_mode & 0o777 == 0o600
        shell = login(customer_key, port)
        assert shell.returncode == 0 and shell.stdout == "in-as-root\n", shell

        assert client.delete(f"{URL}{iid}/").status_code in (200, 202, 204)
        wait_for_state(iid, "terminated", timeout=120, worker=worker)
        # The release reached the agent (its install counts as a prepare there): the customer is out, the operator in.
        [release] = AgentCommand.objects.filter(node=node, kind="release", payload__instance_id=iid)
        assert release.exit_code == 0 and "the operator's" in release.output, release.output
        assert root_keys.read_bytes() == operators
        assert login(customer_key, port).returncode == 255
        assert login(operator_key, port).returncode == 0
    finally:
        stop_process(sshd)
