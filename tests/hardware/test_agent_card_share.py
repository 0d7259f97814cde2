"""CPU and memory in proportion to cards, enforced by the agent's process runtime and read back from the running
processes (cgroup v2 files where the host's cgroup v2 has writable cpu and memory controllers; else the memory
rlimit in /proc/<pid>/limits); and the host's size filled in from the agent's report. The agent runs as a
separate OS process against the live test server."""
import os
from pathlib import Path

import pytest

from inventory.models import Node
from provisioning.drivers import get_driver
from provisioning.services.fleet import node_ref
from tests.factories.hardware import agent_node

from .conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True)]
MIB = 1024 * 1024


def _address_space_limit(pid: int) -> int | None:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max address space"):
            soft = line.split()[3]
            return None if soft == "unlimited" else int(soft)
    raise AssertionError(f"no address space line for {pid}")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_two_containers_on_a_shared_node_get_limits_in_proportion_to_their_cards(live_server, start_agent):
    """Before: a container on a shared node had no CPU or memory limit: one could starve its neighbours."""
    node, token = agent_node(hostname="shared-01.test", cpu_cores=16, memory_mib=8192)  # the operator's values
    agent = start_agent(live_server.url, token)
    driver = get_driver("agent", poll_s=0.05, timeout_s=30)
    ref = node_ref(Node.objects.select_related("zone", "accelerator").get(pk=node.pk))
    started = {}
    for iid, cards in (("11111111-0000-0000-0000-000000000002", [0, 1]),
                       ("11111111-0000-0000-0000-000000000006", [2, 3, 4, 5, 6, 7])):
        out = driver.prepare(ref, cards, kind="container", image="x", ssh_keys=[], env={}, instance_id=iid,
                             ssh_port=31000 + cards[0])
        assert out.exit_code == 0, f"{out.text}\n{agent.log_tail()}"
        started[len(cards)] = (out.meta["pid"], out.meta["limits"], out.text)
    for cards, (pid, limits, text) in started.items():
        assert _alive(pid)
        want_mib = 8192 * cards // 8
        if limits["by"] == "cgroup":
            group = Path(limits["cgroup"])
            assert (group / "memory.max").read_text().strip() == str(want_mib * MIB)
            assert (group / "cpu.max").read_text().split() == [str(16 * 100_000 * cards // 8), "100000"]
            assert str(pid) in (group / "cgroup.procs").read_text().split()
        else:  # no writable cgroup v2 cpu/memory controllers on this host: memory by RLIMIT_AS, as it says
            assert limits == {"by": "rlimit", "millicpus": None, "memory_mib": want_mib}, text
            assert _address_space_limit(pid) == want_mib * MIB
            assert "cpu: not limited" in text and f"RLIMIT_AS {want_mib} MiB" in text
    for cards, iid in ((2, "11111111-0000-0000-0000-000000000002"), (6, "11111111-0000-0000-0000-000000000006")):
        pid, limits, _ = started[cards]
        first = 0 if cards == 2 else 2
        released = driver.release(ref, list(range(first, first + cards)), instance_id=iid)
        assert released.exit_code == 0 and "not removed" not in released.text, released.text
        wait_for(lambda pid=pid: not _alive(pid), timeout=10, what="the process to stop")
        if limits["by"] == "cgroup":
            assert not Path(limits["cgroup"]).exists()
    node.refresh_from_db()
    assert (node.cpu_cores, node.memory_mib) == (16, 8192)  # the agent's report does not override an operator


def test_a_node_of_unknown_size_takes_it_from_its_agents_report(live_server, start_agent):
    node, token = agent_node(hostname="unsized-01.test")
    assert (node.cpu_cores, node.memory_mib) == (None, None)
    agent = start_agent(live_server.url, token)
    total_kib = int(next(ln for ln in open("/proc/meminfo") if ln.startswith("MemTotal:")).split()[1])
    sized = wait_for(lambda: Node.objects.filter(pk=node.pk, cpu_cores__isnull=False, memory_mib__isnull=False)
                     .first(), timeout=30, what=f"the node's size\n{agent.log_tail()}")
    assert (sized.cpu_cores, sized.memory_mib) == (os.cpu_count(), total_kib // 1024)
