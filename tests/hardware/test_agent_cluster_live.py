"""One cluster per instance, end to end: the API creates a multi-node or hybrid instance, a real Celery worker runs
the steps through the agent driver, and one node agent per node (separate processes, `process` runtime, the live
test server) prepares its part. What each part got — its environment and hostfile — is read back from the parts
themselves, and the cross-node readiness runs (one mpirun per vendor, the TCP probes between a hybrid's parts) are
in the instance's readiness reports."""
import json
import os
import random

import pytest

from hardware.models import AgentCommand, NodeCredential
from provisioning.choices import ReportScope
from provisioning.models import NodeGroup, ReadinessReport
from tests.factories.hardware import agent_node
from tests.factories.inventory import ZoneFactory, accelerator
from tests.factories.provisioning import funded, wait_for_state

from .conftest import BIN, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.timeout(400),
              pytest.mark.django_db(transaction=True)]
URL = "/api/v1/instances/"
WORKER_ENV = {"AGENT_COMMAND_POLL_SECONDS": "0.05", "AGENT_COMMAND_TIMEOUT_SECONDS": "60",
              "SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0", "CLUSTER_PROBE_TIMEOUT_SECONDS": "20"}


def _registered(*nodes, agents):
    for node, agent in zip(nodes, agents, strict=True):
        wait_for(lambda node=node: NodeCredential.objects.filter(node=node, registered_at__isnull=False).exists(),
                 timeout=30, what=f"registration of {node}\n{agent.log_tail()}")


def _rdma(tmp_path, name):
    where = tmp_path / name
    where.mkdir()
    for dev in ("rdma_cm", "uverbs0"):
        (where / dev).touch()
    return where


def _environ(pid: int) -> dict:
    raw = open(f"/proc/{pid}/environ", "rb").read().decode()
    return dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)


def _env_file(path) -> dict:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NNODES")


def test_two_node_h100_bare_metal_parts_share_hostfile_and_rendezvous(live_server, start_agent, start_worker,
                                                                     member_factory, session_client_for, tmp_path):
    zone = ZoneFactory(slug="zone-cluster", name="zone-cluster", cluster_interface="lo")
    nodes, agents = [], []
    for i, rdma in enumerate((_rdma(tmp_path, "ib-0"), tmp_path / "no-ib")):
        node, token = agent_node(hostname=f"gpu-cluster-{i}.test", zone=zone, ssh_host=f"127.0.0.{21 + i}",
                                 fabric_address=f"127.0.0.{21 + i}")
        nodes.append(node)
        agents.append(start_agent(live_server.url, token, name=f"gpu{i}", extra_args=("--rdma-dir", str(rdma))))
    _registered(*nodes, agents=agents)
    worker = start_worker(extra_env=WORKER_ENV)
    client = session_client_for(funded(member_factory(role="owner")))

    r = client.post(URL, {"name": "two-node", "kind": "bare_metal", "zone": "zone-cluster",
                          "items": [{"accelerator": "h100-sxm-80g", "count": 16}], "image": "pytorch-2.3-cuda12.3"},
                    format="json")
    assert r.status_code == 201, r.json()
    iid = r.json()["id"]
    wait_for_state(iid, "running", timeout=180, worker=worker)

    groups = list(NodeGroup.objects.filter(instance_id=iid).order_by("item_index", "id"))
    by_node = {n.pk: (n, a) for n, a in zip(nodes, agents, strict=True)}
    parts = []
    for rank, group in enumerate(groups):  # read back from each node: the environment file and the hostfile it names
        node, agent = by_node[group.node_id]
        env = _env_file(agent.state_dir / "instances" / iid / "environment")
        parts.append((node, env, open(env["CARDMIX_HOSTFILE"]).read()))
        assert env["NODE_RANK"] == str(rank) and env["LOCAL_WORLD_SIZE"] == "8"
        assert env["CARDMIX_CLUSTER_ADDR"] == node.fabric_address
        assert env["NCCL_SOCKET_IFNAME"] == "lo" and env["GLOO_SOCKET_IFNAME"] == "lo"
        # RDMA only where the node has its devices; elsewhere NCCL is told so.
        assert env["NCCL_IB_DISABLE"] == ("0" if node.hostname == "gpu-cluster-0.test" else "1")
    master = parts[0][0].fabric_address
    assert {tuple(env[k] for k in RENDEZVOUS) for _, env, _ in parts} == {(master, "29500", "16", "2")}
    hostfiles = {hostfile for _, _, hostfile in parts}
    assert hostfiles == {"".join(f"{n.fabric_address} slots=8\n" for n, _, _ in parts)}

    # One inter-node run over both nodes, started by the first node's agent, in the readiness reports.
    (run,) = AgentCommand.objects.filter(kind="inter_node")
    assert run.state == "done" and run.exit_code == 0 and run.node_id == groups[0].node_id
    assert "# fake mpirun argv=['-np', '16', '-H', '127.0.0.21:8,127.0.0.22:8'" in run.output or \
        "# fake mpirun argv=['-np', '16', '-H', '127.0.0.22:8,127.0.0.21:8'" in run.output
    report = ReadinessReport.objects.get(instance_id=iid, scope=ReportScope.INTER_NODE)
    assert report.passed and report.raw_output == run.output and sorted(report.nodes) == sorted(
        n.hostname for n in nodes)
    assert report.floor_gbps == float(zone.inter_node_floor_gbps) and report.busbw_largest_gbps > report.floor_gbps
    body = client.get(f"{URL}{iid}/readiness/").json()["results"]
    assert [(b["scope"], b["passed"]) for b in body if b["scope"] == "inter_node"] == [("inter_node", True)]

    assert client.delete(f"{URL}{iid}/").status_code == 202
    wait_for_state(iid, "terminated", timeout=120, worker=worker)


def test_hybrid_910b_h800_parts_share_hostfile_rendezvous_and_reach_each_other(
        live_server, start_agent, start_worker, member_factory, session_client_for, tmp_path):
    # The process runtime joins no network: the instance's /24 is taken from loopback so that each part's probe
    # really listens on its own cluster address and connects to the other's, across the two agent processes.
    pool = f"127.{random.randint(100, 250)}.0.0/16"
    zone = ZoneFactory(slug="zone-hybrid", name="zone-hybrid")  # cluster_network: vxlan (the default)
    npu, npu_token = agent_node(hostname="npu-hybrid.test", zone=zone, accelerator=accelerator("ascend-910b"),
                                fabric_address="192.0.2.31")
    gpu, gpu_token = agent_node(hostname="gpu-hybrid.test", zone=zone, accelerator=accelerator("h800-sxm-80g"),
                                fabric_address="192.0.2.32")
    agents = [start_agent(live_server.url, npu_token, name="npu",
                          extra_args=("--vendor", "huawei", "--readiness-bin", str(BIN))),
              start_agent(live_server.url, gpu_token, name="gpu",
                          extra_args=("--rdma-dir", str(_rdma(tmp_path, "ib")),
                                      "--readiness-bin", str(BIN / "all_reduce_perf")),
                          extra_env={"CARDMIX_FAKE_READINESS": "nccl_h800_8x_pass.txt"})]
    _registered(npu, gpu, agents=agents)
    worker = start_worker(extra_env={**WORKER_ENV, "CLUSTER_SUBNET_POOL": pool})
    client = session_client_for(funded(member_factory(role="owner")))

    r = client.post(URL, {"name": "hybrid", "kind": "container", "zone": "zone-hybrid",
                          "items": [{"accelerator": "ascend-910b", "count": 8}, {"accelerator": "h800-sxm-80g", "count": 8}],
                          "images": {"huawei": "cann-torch-npu", "nvidia": "pytorch-2.3-cuda12.3"}}, format="json")
    assert r.status_code == 201, r.json()
    iid = r.json()["id"]
    wait_for_state(iid, "running", timeout=180, worker=worker)

    base = pool.split(".0.0/")[0]
    addresses = [f"{base}.0.10", f"{base}.0.11"]
    parts = {}
    for node, agent in ((npu, agents[0]), (gpu, agents[1])):
        prepare = AgentCommand.objects.get(node=node, kind="prepare")
        env = _environ(prepare.meta["pid"])  # the stand-in container's own environment
        hostfile = open(env["CARDMIX_HOSTFILE"]).read()
        where = agent.state_dir / "instances" / prepare.payload["name"]
        assert env["CARDMIX_HOSTFILE"] == str(where / "hostfile")
        parts[node.hostname] = (env, hostfile, json.loads((where / "network.json").read_text()))
    npu_env, npu_hosts, npu_net = parts["npu-hybrid.test"]
    gpu_env, gpu_hosts, gpu_net = parts["gpu-hybrid.test"]
    assert npu_hosts == gpu_hosts == f"{addresses[0]} slots=8\n{addresses[1]} slots=8\n"
    assert tuple(npu_env[k] for k in RENDEZVOUS) == tuple(gpu_env[k] for k in RENDEZVOUS) == (
        addresses[0], "29500", "16", "2")
    assert (npu_env["NODE_RANK"], gpu_env["NODE_RANK"]) == ("0", "1")
    assert npu_env["LOCAL_WORLD_SIZE"] == gpu_env["LOCAL_WORLD_SIZE"] == "8"
    assert (npu_env["HCCL_IF_IP"], npu_env["HCCL_SOCKET_IFNAME"], npu_env["HCCL_WHITELIST_DISABLE"]) == (
        addresses[0], "eth0", "1")
    assert npu_env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7" and "NCCL_SOCKET_IFNAME" not in npu_env
    assert (gpu_env["NCCL_SOCKET_IFNAME"], gpu_env["NCCL_IB_DISABLE"]) == ("eth0", "0")  # its node has RDMA
    assert "HCCL_IF_IP" not in gpu_env
    # What the docker runtime would have set up on each node: the same VXLAN, each end towards the other node.
    for net, local, peer in ((npu_net, "192.0.2.31", "192.0.2.32"), (gpu_net, "192.0.2.32", "192.0.2.31")):
        assert net["mode"] == "vxlan"
        add = next(c for c in net["commands"] if c[1:3] == ["link", "add"])
        assert add[3:] == ["cmxvx0", "type", "vxlan", "id", "100000", "dstport", "4789", "local", local, "nolearning"]
        assert [c[-1] for c in net["commands"] if c[1:3] == ["fdb", "append"]] == [peer]

    # The TCP probes ran on both nodes at once and each part reached the other's address.
    probes = AgentCommand.objects.filter(kind="reachability").order_by("node__hostname")
    assert [(p.node.hostname, p.state, p.exit_code) for p in probes] == [
        ("gpu-hybrid.test", "done", 0), ("npu-hybrid.test", "done", 0)]
    report = ReadinessReport.objects.get(instance_id=iid, scope=ReportScope.REACHABILITY)
    assert report.passed and report.tool == "tcp"
    assert [(row["from"], row["to"], row["address"], row["ok"]) for row in report.rows] == [
        (0, 1, addresses[1], True), (1, 0, addresses[0], True)]
    assert "== npu-hybrid.test ==" in report.raw_output and "1 of 1 other part(s) connected" in report.raw_output
    scopes = sorted(ReadinessReport.objects.filter(instance_id=iid).values_list("scope", flat=True))
    assert scopes == ["intra_node", "intra_node", "reachability"]

    assert client.delete(f"{URL}{iid}/").status_code == 202
    wait_for_state(iid, "terminated", timeout=120, worker=worker)
    for node in (npu, gpu):
        pid = AgentCommand.objects.get(node=node, kind="prepare").meta["pid"]
        wait_for(lambda pid=pid: not os.path.exists(f"/proc/{pid}") or _zombie(pid), timeout=10,
                 what=f"process {pid} to stop")


def _zombie(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().split(") ")[1].startswith("Z")
    except OSError:
        return True
