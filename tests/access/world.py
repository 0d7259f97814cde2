"""A running instance whose node is this machine's loopback: its ports and sshd are processes the test starts."""
import asyncio
import json
import os
import socket
import subprocess
import sys
import uuid

from inventory.catalog_seed import seed_catalog
from provisioning.choices import GroupState, InstanceState
from provisioning.models import NodeGroup
from tests.factories.inventory import NodeFactory, accelerator
from tests.factories.provisioning import InstanceFactory
from tests.hardware.conftest import free_port, wait_for

SSHD = "/usr/sbin/sshd"


def loopback_instance(organization, *, kind="container", ssh_port=None, http_ports=None, node_ssh_port=22):
    """A running one-card instance of the catalog's PyTorch image (JupyterLab on 8888) on a loopback node.

    A container with `ssh_port` is in a network of its own: its sshd and its `http_ports` ({"8888": node port})
    are published on the node; bare metal listens on the node itself."""
    seed_catalog()
    node = NodeFactory(ssh_host="127.0.0.1", ssh_port=node_ssh_port, accelerator=accelerator("h100-sxm-80g"))
    instance = InstanceFactory(organization=organization, kind=kind, state=InstanceState.RUNNING)
    NodeGroup.objects.create(instance=instance, item_index=0, accelerator="h100-sxm-80g", node=node,
                             card_indices=[0], state=GroupState.CHECKED, ssh_port=ssh_port,
                             http_ports=http_ports or {})
    return instance


def start_sshd(tmp_path, authorized_keys: str):
    """A real Debian sshd on a free loopback port that lets root in with `authorized_keys`: (process, port)."""
    port = free_port()
    host_key = tmp_path / "ssh_host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    (tmp_path / "authorized_keys").write_text(authorized_keys + "\n")
    os.makedirs("/run/sshd", exist_ok=True)
    log = open(tmp_path / "sshd.log", "ab")  # noqa: SIM115 - the child writes it until the test ends
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", "/dev/null", "-h", str(host_key), "-p", str(port), "-o", "ListenAddress=127.0.0.1",
         "-o", f"AuthorizedKeysFile={tmp_path / 'authorized_keys'}", "-o", "StrictModes=no",
         "-o", "PermitRootLogin=yes", "-o", "UsePAM=no", "-o", "PidFile=none", "-o", "PasswordAuthentication=no"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()

    def listening():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return proc.poll() is not None

    wait_for(listening, timeout=30, what="sshd")
    assert proc.poll() is None, (tmp_path / "sshd.log").read_text()
    return proc, port


def start_jupyter(tmp_path, *, base_url: str, token: str):
    """A real jupyter-server (with ipykernel) on a free loopback port under `base_url`: (process, port)."""
    port = free_port()
    log = open(tmp_path / "jupyter.log", "ab")  # noqa: SIM115 - the child writes it until the test ends
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--ServerApp.base_url={base_url}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}",
         "--ServerApp.port_retries=0", "--allow-root"],
        env={**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"), "JUPYTER_DATA_DIR": str(tmp_path / "data"),
             "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg")},
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    import httpx

    def answers():
        try:
            return httpx.get(f"http://127.0.0.1:{port}{base_url}api", timeout=1).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None

    wait_for(answers, timeout=60, what=f"jupyter-server\n{(tmp_path / 'jupyter.log').read_text()[-2000:]}")
    assert proc.poll() is None, (tmp_path / "jupyter.log").read_text()[-2000:]
    return proc, port


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)


async def kernel_execute(ws, code: str) -> str:
    """Run `code` over an open Jupyter kernel channel WebSocket; the stdout it printed (tests/access)."""
    msg_id = uuid.uuid4().hex
    await ws.send(json.dumps({
        "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex,
                   "msg_type": "execute_request", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                    "allow_stdin": False}}))
    out = ""
    while True:
        msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=60))
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out += msg["content"]["text"]
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return out
