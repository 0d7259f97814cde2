"""On a host with an NVIDIA GPU: the agent (process runtime) reports the real cards from the real nvidia-smi.

Skipped where there is no nvidia-smi (CI never has a GPU); `gpu` is not a service CI must provide. On a GPU
host run `bin/test -m gpu`; `python3 build/cardmix-agent.pyz --report` shows the same without a platform."""
import shutil
import subprocess

import pytest

from hardware.models import NodeCredential
from tests.factories.hardware import agent_node

from .conftest import wait_for

REAL_SMI = shutil.which("nvidia-smi")
pytestmark = [pytest.mark.gpu, pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(REAL_SMI is None, reason="no nvidia-smi on this host")]


def smi_rows() -> list[tuple[int, str, int]]:
    out = subprocess.run([REAL_SMI, "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [(int(i), name.strip(), int(mib)) for i, name, mib in (ln.split(",") for ln in out.splitlines() if ln)]


def test_agent_reports_the_real_gpus(live_server, start_agent):
    node, token = agent_node(hostname="real-gpu-host.test")
    agent = start_agent(live_server.url, token, extra_args=("--nvidia-smi", REAL_SMI))  # last flag wins
    cred = wait_for(lambda: NodeCredential.objects.filter(node=node, registered_at__isnull=False).first(),
                    timeout=60, what=f"registration\n{agent.log_tail()}")
    devices = cred.facts["devices"]
    print("reported:", devices, cred.facts["driver_versions"])
    assert devices, cred.facts
    assert [(d["index"], d["name"], d["memory_total_mib"]) for d in devices] == smi_rows()
    assert all(d["uuid"].startswith("GPU-") for d in devices)
    assert cred.facts["driver_versions"]["nvidia"] == devices[0]["driver_version"] != ""
    assert cred.facts["health"] == "ok"
