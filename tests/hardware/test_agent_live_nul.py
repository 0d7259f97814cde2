"""A NUL byte in what a node prints (a binary dump, a broken tool) reaches the platform as U+FFFD: the agent
process, against the live test server, delivers the result instead of losing it (which the driver would
only see as a 124 timeout)."""
import pytest

from hardware.models import AgentCommand, NodeCredential
from provisioning.drivers import get_driver
from provisioning.services.fleet import node_ref
from tests.factories.hardware import agent_node

from .conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_output_with_nul_is_delivered(live_server, start_agent, tmp_path):
    tool = tmp_path / "all_reduce_perf"
    tool.write_text("#!/bin/sh\nprintf '# nccl-tests\\000garbage\\n# Avg bus bandwidth    : 0\\n'\n")
    tool.chmod(0o755)
    node, token = agent_node(hostname="gpu-agent-nul.test")
    agent = start_agent(live_server.url, token, extra_args=("--readiness-bin", str(tool)))
    wait_for(lambda: NodeCredential.objects.filter(node=node, registered_at__isnull=False).exists(), timeout=30,
             what=f"registration\n{agent.log_tail()}")
    out = get_driver("agent", poll_s=0.05, timeout_s=20).readiness(node_ref(node), [0, 1])
    assert out.exit_code == 0, out.text + agent.log_tail()
    assert "# nccl-tests\ufffdgarbage" in out.text
    assert AgentCommand.objects.get(node=node, kind="readiness").state == "done"
