"""`cardmix launch`: a two-line task on an agent node (process runtime) whose "container" is a real sshd."""
import os
import subprocess
import sys
import textwrap

import pytest

from hardware.models import NodeCredential
from provisioning.models import Instance
from tests.factories.hardware import agent_node
from tests.factories.inventory import ZoneFactory
from tests.factories.provisioning import funded, wait_for_state
from tests.factories.tenancy import SshKeyFactory, make_token
from tests.hardware.conftest import free_port, start_agent, wait_for  # noqa: F401 (start_agent: a fixture)

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.timeout(300),
              pytest.mark.django_db(transaction=True)]
WORKER_ENV = {"AGENT_COMMAND_POLL_SECONDS": "0.05", "AGENT_COMMAND_TIMEOUT_SECONDS": "60",
              "SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0"}
SSHD = "/usr/sbin/sshd"


@pytest.mark.skipif(not os.path.exists(SSHD) or os.geteuid() != 0, reason="needs openssh-server and root")
def test_launch_runs_setup_and_run_over_ssh_prints_the_output_and_stops(
        live_server, start_agent, start_worker, member_factory, settings, tmp_path):  # noqa: F811
    base = free_port()
    settings.CONTAINER_SSH_PORT_BASE = base
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "user")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "host")], check=True)
    # The instance's "container": the process runtime starts it in the instance's folder, where the agent
    # wrote authorized_keys, with CARDMIX_SSH_PORT set.
    container = tmp_path / "container.sh"
    container.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        mkdir -p /run/sshd
        exec {SSHD} -D -e -f /dev/null -h {tmp_path / 'host'} -p "$CARDMIX_SSH_PORT" -o ListenAddress=127.0.0.1 \\
          -o AuthorizedKeysFile="$PWD/authorized_keys" -o StrictModes=no -o PermitRootLogin=yes -o UsePAM=no \\
          -o PidFile=none -o PasswordAuthentication=no
        """))
    container.chmod(0o755)
    zone = ZoneFactory(slug="zone-agent", name="zone-agent")
    node, token = agent_node(hostname="gpu-agent-launch.test", zone=zone, ssh_host="127.0.0.1")
    agent = start_agent(live_server.url, token, extra_args=("--process-command", str(container)))
    wait_for(lambda: NodeCredential.objects.filter(node=node, registered_at__isnull=False).exists(),
             timeout=30, what=f"agent registration\n{agent.log_tail()}")
    worker = start_worker(extra_env={**WORKER_ENV, "CONTAINER_SSH_PORT_BASE": str(base)})
    owner = funded(member_factory(role="owner"))
    SshKeyFactory(user=owner.user, name="laptop", public_key=(tmp_path / "user.pub").read_text().strip())
    _, secret = make_token(owner)
    task = tmp_path / "task.yaml"
    task.write_text(textwrap.dedent("""\
        name: hello-task
        resources:
          accelerators: H100:2
          zone: zone-agent
        envs:
          GREETING: hello
        setup: echo "setting up"
        run: |
          echo "$GREETING from the task"
          python3 -c 'print(6 * 7)'
        """))
    env = {**os.environ, "CARDMIX_URL": live_server.url, "CARDMIX_TOKEN": secret,
           "CARDMIX_SSH_OPTS": f"-i {tmp_path / 'user'} -o UserKnownHostsFile={tmp_path / 'known_hosts'}"}
    proc = subprocess.run([sys.executable, "-m", "cardmix", "launch", str(task)], capture_output=True, text=True,
                          env=env, timeout=240)
    assert proc.returncode == 0, (proc.stdout, proc.stderr, worker.log_tail(), agent.log_tail())
    lines = proc.stdout.splitlines()
    assert "setting up" in lines and "hello from the task" in lines and "42" in lines, proc.stdout
    inst = Instance.objects.get(name="hello-task")
    wait_for_state(inst.pk, "stopped", timeout=60, worker=worker)

    # A failing run is the command's exit status, and the instance is still stopped.
    task.write_text(task.read_text().replace("python3 -c 'print(6 * 7)'", "exit 9").replace("hello-task", "fails"))
    proc = subprocess.run([sys.executable, "-m", "cardmix", "launch", str(task)], capture_output=True, text=True,
                          env=env, timeout=240)
    assert proc.returncode == 9, (proc.stdout, proc.stderr)
    wait_for_state(Instance.objects.get(name="fails").pk, "stopped", timeout=60, worker=worker)


def test_a_task_file_with_unknown_fields_is_refused_before_anything_is_created(tmp_path):
    task = tmp_path / "task.yaml"
    task.write_text("resources: {accelerators: H100:1, gpus: 2}\nrun: echo\nsetpu: x\n")
    proc = subprocess.run([sys.executable, "-m", "cardmix", "launch", str(task)], capture_output=True, text=True,
                          env={**os.environ, "CARDMIX_TOKEN": "cmx_unused", "CARDMIX_URL": "http://127.0.0.1:9"})
    assert proc.returncode == 2 and "setpu" in proc.stderr and "resources.gpus" in proc.stderr
