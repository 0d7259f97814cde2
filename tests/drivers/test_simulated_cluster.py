"""The simulated fleet prints a cluster's setup, its cross-node runs and its TCP probes in the real formats."""
from provisioning.drivers import NodeRef
from provisioning.drivers.simulated import SimulatedDriver
from provisioning.readiness import evaluate, parse_output, parse_reachability

H800 = NodeRef(id="n1", hostname="gpu-1.test", accelerator="h800-sxm-80g", vendor="nvidia", collective="nccl",
               fabric="roce-200g")
H800B = NodeRef(id="n2", hostname="gpu-2.test", accelerator="h800-sxm-80g", vendor="nvidia", collective="nccl",
                fabric="roce-200g")
NPU = NodeRef(id="n3", hostname="npu-1.test", accelerator="ascend-910b", vendor="huawei", collective="hccl",
              fabric="roce-200g")
PLAN = {"mode": "vxlan", "parts": [
    {"part": 0, "node_id": "n3", "address": "10.96.3.10", "probe_port": 29400},
    {"part": 1, "node_id": "n1", "address": "10.96.3.11", "probe_port": 29404},
    {"part": 2, "node_id": "n2", "address": "10.96.3.12", "probe_port": 29400}]}


def driver():
    return SimulatedDriver(delay_scale=0, seed=7, failure_rate_scale=0)


def test_reachability_prints_one_probe_per_ordered_pair_and_a_timeout_cuts_the_last_part_off():
    out = driver().reachability([NPU, H800, H800B], PLAN)
    result = parse_reachability(out.text, out.exit_code, parts=3)
    assert result.passed and len(result.rows) == 6 and out.meta["tool"] == "tcp"
    out = driver().reachability([NPU, H800, H800B], PLAN, forced_faults=["timeout"])
    result = parse_reachability(out.text, out.exit_code, parts=3)
    assert not result.passed and out.exit_code == 1
    assert sorted((r["from"], r["to"]) for r in result.rows if not r["ok"]) == [(0, 2), (1, 2), (2, 0), (2, 1)]


def test_inter_node_runs_each_nodes_own_cards():
    out = driver().inter_node([H800, H800B], 4, cards=[[4, 5, 6, 7], [0, 1, 2, 3]])
    assert out.meta["cards"] == [[4, 5, 6, 7], [0, 1, 2, 3]] and out.meta["ranks"] == 8
    parsed = parse_output(out.text, tool="nccl-tests", ranks=8)
    assert evaluate(parsed, 20, out.exit_code).passed
    assert out.text.count("on gpu-1.test") == 4 and out.text.count("on gpu-2.test") == 4


def test_prepare_says_which_part_network_and_rendezvous_it_set_up():
    part = {"part": 1, "address": "10.96.3.11", "parts": PLAN["parts"], "hostfile": "x slots=8\n",
            "hostfile_path": "/etc/cardmix/hostfile",
            "network": {"mode": "vxlan", "vxlan": "cmxvx3", "vni": 100003, "peers": ["192.0.2.11"],
                        "bridge": "cmxbr3", "subnet": "10.96.3.0/24"},
            "env": {"WORLD_SIZE": "24", "NODE_RANK": "1", "MASTER_ADDR": "10.96.3.10", "MASTER_PORT": "29500"}}
    out = driver().prepare(H800, [4, 5, 6, 7], kind="container", image="img", ssh_keys=[], instance_id="i",
                           env={"WORLD_SIZE": "24", "NODE_RANK": "1", "MASTER_ADDR": "10.96.3.10",
                                "MASTER_PORT": "29500", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}, cluster=part)
    assert out.exit_code == 0
    assert ("cluster part 1 of 3 on gpu-1.test: vxlan cmxvx3 (VNI 100003, peers 192.0.2.11) on bridge cmxbr3 "
            "10.96.3.0/24, address 10.96.3.11\n") in out.text
    assert "WORLD_SIZE 24, NODE_RANK 1, MASTER_ADDR 10.96.3.10:29500" in out.text
    assert out.meta["cluster"]["env"] == {"MASTER_ADDR": "10.96.3.10", "MASTER_PORT": "29500", "NODE_RANK": "1",
                                          "WORLD_SIZE": "24"}
