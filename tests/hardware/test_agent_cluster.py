"""The agent's side of one cluster per instance, on the exact commands it builds: the docker runtime against the fake
CLIs in tests/hardware/bin (docker, ip, bridge), the process runtime's records, RDMA devices, and — where this
sandbox lets a test create network namespaces — the VXLAN commands run for real between two namespaces."""
import json
import os
import shutil
import socket
import subprocess
import uuid

import pytest

from inventory.models import Accelerator, Node, Zone
from provisioning.models import NodeGroup
from provisioning.services.cluster import cluster_plan, part_view

from .conftest import BIN, agent_package, wait_for

agent_mod = agent_package()

IID = "3f1c2b7e-0000-4000-8000-00000000c1c1"


def _hybrid_plan(mode="vxlan", slot=3):
    """The platform's plan for 8 × 910B on one node + 4 × H800 (cards 4-7) on another, as the worker builds it."""
    zone = Zone(slug="z", cluster_network=mode, cluster_interface="bond1")
    ascend = Accelerator(slug="ascend-910b", vendor="huawei", collective="hccl")
    h800 = Accelerator(slug="h800-sxm-80g", vendor="nvidia", collective="nccl")
    npu = Node(hostname="npu-1.test", zone=zone, accelerator=ascend, fabric_address="192.0.2.11")
    gpu = Node(hostname="gpu-1.test", zone=zone, accelerator=h800, fabric_address="192.0.2.12")
    groups = [NodeGroup(node=npu, card_indices=list(range(8)), item_index=0),
              NodeGroup(node=gpu, card_indices=[4, 5, 6, 7], item_index=1)]
    return cluster_plan(kind="container", groups=groups, slot=slot)


def _payload(part, *, port=30004):
    vendor = "huawei" if part["parts"][part["part"]]["vendor"] == "huawei" else "nvidia"
    cards = part["parts"][part["part"]]["cards"]
    visible = "ASCEND_RT_VISIBLE_DEVICES" if vendor == "huawei" else "CUDA_VISIBLE_DEVICES"
    env = {visible: ",".join(map(str, cards)), **({"NCCL_IB_DISABLE": "0"} if vendor == "nvidia" else {}),
           **part["env"]}
    return {"instance_id": IID, "kind": "container", "cards": cards, "image": "pytorch:2.3", "ssh_keys": ["k"],
            "env": env, "vendor": vendor, "collective": "hccl" if vendor == "huawei" else "nccl",
            "name": f"cardmix-{IID}-{min(cards)}", "ssh_port": port, "cluster": part}


def make_agent(tmp_path, *extra):
    args = agent_mod.parse_args(["--server", "http://127.0.0.1:9", "--token", "cmxn_test", "--vendor", "nvidia",
                                 "--nvidia-smi", str(BIN / "nvidia-smi"), "--state-dir", str(tmp_path / "state"),
                                 "--docker", str(BIN / "docker"), "--ip", str(BIN / "ip"),
                                 "--bridge", str(BIN / "bridge"), "--rdma-dir", str(tmp_path / "no-rdma"), *extra])
    return agent_mod.Agent(args)


def rdma_dir(tmp_path):
    where = tmp_path / "infiniband"
    where.mkdir()
    for name in ("rdma_cm", "uverbs0", "uverbs1"):
        (where / name).touch()
    return where


def test_vxlan_commands_are_the_interface_its_mtu_the_bridge_and_one_flood_entry_per_other_node():
    net = part_view(_hybrid_plan(), 1)["network"]
    assert agent_mod.vxlan_up_argv(net) == [
        ["ip", "link", "add", "cmxvx3", "type", "vxlan", "id", "100003", "dstport", "4789", "local", "192.0.2.12",
         "dev", "bond1", "nolearning"],
        ["ip", "link", "set", "cmxvx3", "mtu", "1450"],
        ["ip", "link", "set", "cmxvx3", "master", "cmxbr3"],
        ["ip", "link", "set", "cmxvx3", "up"],
        ["bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "cmxvx3", "dst", "192.0.2.11"]]
    assert agent_mod.vxlan_down_argv(net) == [["ip", "link", "del", "cmxvx3"]]
    assert agent_mod.cluster_network_create_argv(net, IID) == [
        "docker", "network", "create", "--driver", "bridge", "--subnet", "10.96.3.0/24", "--gateway", "10.96.3.253",
        "--label", f"cardmix.instance={IID}", "-o", "com.docker.network.bridge.name=cmxbr3",
        "-o", "com.docker.network.driver.mtu=1450", "cardmix-cluster-3"]
    # Each node's bridge has its own gateway on the one segment; every part its own address.
    plan = _hybrid_plan()
    assert {part_view(plan, i)["network"]["gateway"] for i in (0, 1)} == {"10.96.3.254", "10.96.3.253"}
    assert [p["address"] for p in plan["parts"]] == ["10.96.3.10", "10.96.3.11"]


def test_docker_part_joins_its_instance_network_at_its_address_with_the_hostfile_and_rdma(tmp_path, docker):
    agent = make_agent(tmp_path, "--runtime", "docker", "--rdma-dir", str(rdma_dir(tmp_path)))
    payload = _payload(part_view(_hybrid_plan(), 1))
    text, code, meta = agent.do_prepare(payload)
    assert code == 0, text
    where = agent.state_dir / "instances" / payload["name"]
    assert (where / "hostfile").read_text() == "10.96.3.10 slots=8\n10.96.3.11 slots=4\n"
    (container,) = docker.containers().values()
    argv = container["argv"]
    assert argv[argv.index("--network") + 1] == "cardmix-cluster-3" and argv.count("--network") == 1
    assert argv[argv.index("--ip") + 1] == "10.96.3.11"
    assert argv[argv.index("-p") + 1] == "30004:22"
    assert f"{where / 'hostfile'}:/etc/cardmix/hostfile:ro" in argv
    devices = [argv[i + 1] for i, a in enumerate(argv) if a == "--device"]
    assert devices == [str(tmp_path / "infiniband" / n) for n in ("rdma_cm", "uverbs0", "uverbs1")]
    assert argv[argv.index("--cap-add") + 1] == "IPC_LOCK" and "memlock=-1" in argv
    env = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-e")
    assert env["NCCL_IB_DISABLE"] == "0" and env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert env["MASTER_ADDR"] == "10.96.3.10" and env["NODE_RANK"] == "1" and env["WORLD_SIZE"] == "12"
    assert env["NCCL_SOCKET_IFNAME"] == "eth0"
    # Its network: created once with its subnet and this node's gateway, then the VXLAN joined to its bridge.
    assert docker.networks()["cardmix-cluster-3"] == {"labels": {"cardmix.instance": IID}}
    assert docker.net_calls() == agent_mod.vxlan_up_argv(payload["cluster"]["network"])
    assert meta["cluster"] == {"part": 1, "address": "10.96.3.11", "network": "vxlan"}
    assert "cluster part 1 of 2: vxlan cmxvx3" in text and "RDMA: 3 device(s)" in text

    # The release of the instance's last part on the node takes its network and VXLAN with it.
    text, code, _ = agent.do_release({"cards": payload["cards"], "instance_id": IID, "name": payload["name"]})
    assert code == 0, text
    assert "cardmix-cluster-3" not in docker.networks() and docker.containers() == {}
    assert docker.net_calls()[-1] == ["ip", "link", "del", "cmxvx3"]


def test_two_parts_on_one_node_share_the_network_until_the_last_is_released(tmp_path, docker):
    zone = Zone(slug="z", cluster_network="vxlan")
    h100 = Accelerator(slug="h100-sxm-80g", vendor="nvidia", collective="nccl")
    node = Node(hostname="gpu-2.test", zone=zone, accelerator=h100, ssh_host="127.0.0.1")
    plan = cluster_plan(kind="container", groups=[NodeGroup(node=node, card_indices=[0, 1, 2, 3]),
                                                  NodeGroup(node=node, card_indices=[4, 5, 6, 7])], slot=5)
    agent = make_agent(tmp_path, "--runtime", "docker")
    first, second = _payload(part_view(plan, 0), port=30000), _payload(part_view(plan, 1), port=30004)
    assert first["cluster"]["network"]["peers"] == [] and "local" in first["cluster"]["network"]
    assert agent.do_prepare(first)[1] == 0
    text, code, _ = agent.do_prepare(second)  # the network exists: joined, not an error
    assert code == 0, text
    assert list(docker.networks()) == ["cardmix-cluster-5"] and len(docker.containers()) == 2
    text, code, _ = agent.do_release({"cards": first["cards"], "instance_id": IID, "name": first["name"]})
    assert code == 0 and "kept: other parts" in text and "cardmix-cluster-5" in docker.networks()
    text, code, _ = agent.do_release({"cards": second["cards"], "instance_id": IID, "name": second["name"]})
    assert code == 0 and docker.networks() == {}


def test_a_network_left_by_another_instance_on_the_slot_is_removed_before_joining(tmp_path, docker):
    agent = make_agent(tmp_path, "--runtime", "docker")
    payload = _payload(part_view(_hybrid_plan(), 1))
    subprocess.run([str(BIN / "docker"), "network", "create", "--label", "cardmix.instance=old-one",
                    "cardmix-cluster-3"], check=True, capture_output=True)
    subprocess.run([str(BIN / "docker"), "run", "-d", "--name", "cardmix-old-one-0", "--label",
                    "cardmix.instance=old-one", "--network", "cardmix-cluster-3", "img"], check=True, capture_output=True)
    text, code, _ = agent.do_prepare(payload)
    assert code == 0, text
    assert "removed stale cluster network cardmix-cluster-3 of instance old-one" in text
    assert docker.networks()["cardmix-cluster-3"] == {"labels": {"cardmix.instance": IID}}
    assert [c["name"] for c in docker.containers().values()] == [payload["name"]]


def test_host_network_part_publishes_nothing_and_its_sshd_takes_the_port(tmp_path, docker):
    agent = make_agent(tmp_path, "--runtime", "docker")
    payload = _payload(part_view(_hybrid_plan(mode="host", slot=None), 1))
    text, code, _ = agent.do_prepare(payload)
    assert code == 0, text
    (container,) = docker.containers().values()
    argv = container["argv"]
    assert argv[argv.index("--network") + 1] == "host" and "-p" not in argv and "--ip" not in argv
    env = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-e")
    assert env["CARDMIX_SSH_PORT"] == "30004" and env["MASTER_ADDR"] == "192.0.2.11"
    assert env["NCCL_SOCKET_IFNAME"] == "bond1" and env["CARDMIX_CLUSTER_ADDR"] == "192.0.2.12"
    assert env["NCCL_IB_DISABLE"] == "1"  # the platform's 0, but this node has no RDMA device
    assert "--cap-add" not in argv and "no RDMA device" in text
    assert docker.net_calls() == [] and docker.networks() == {}


def test_process_runtime_records_the_network_and_exports_the_part_environment(tmp_path):
    agent = make_agent(tmp_path, "--runtime", "process")
    payload = _payload(part_view(_hybrid_plan(), 0))
    text, code, meta = agent.do_prepare(payload)
    try:
        assert code == 0, text
        where = agent.state_dir / "instances" / payload["name"]
        def environ():
            return dict(kv.split("=", 1) for kv in open(f"/proc/{meta['pid']}/environ").read().split("\0") if "=" in kv)

        # Read once the stand-in runs its own program (a loaded machine may show it between fork and exec).
        wait_for(lambda: "CARDMIX_IMAGE" in environ(), timeout=10, what=f"process {meta['pid']} to run its program")
        environ = environ()
        assert environ["HCCL_IF_IP"] == "10.96.3.10" and environ["HCCL_SOCKET_IFNAME"] == "eth0"
        assert environ["HCCL_WHITELIST_DISABLE"] == "1" and environ["NODE_RANK"] == "0"
        assert environ["CARDMIX_HOSTFILE"] == str(where / "hostfile")
        recorded = json.loads((where / "network.json").read_text())
        assert recorded["mode"] == "vxlan"
        assert recorded["commands"][0][:3] == [str(BIN / "docker"), "network", "create"]
        assert recorded["commands"][1:] == agent_mod.vxlan_up_argv(payload["cluster"]["network"], ip=str(BIN / "ip"),
                                                                   bridge=str(BIN / "bridge"))
        assert "--ip" in recorded["run_args"] and "10.96.3.10" in recorded["run_args"]
    finally:
        agent.do_release({"cards": payload["cards"], "instance_id": IID, "name": payload["name"]})


def test_bare_metal_part_gets_the_hostfile_on_the_host_and_release_takes_it(tmp_path, docker):
    zone = Zone(slug="z", cluster_network="vxlan", cluster_interface="bond1")  # bare metal: the host's network
    h100 = Accelerator(slug="h100-sxm-80g", vendor="nvidia", collective="nccl")
    nodes = [Node(hostname=f"bm-{i}", zone=zone, accelerator=h100, fabric_address=f"192.0.2.{41 + i}")
             for i in range(2)]
    plan = cluster_plan(kind="bare_metal", groups=[NodeGroup(node=n, card_indices=list(range(8))) for n in nodes],
                        slot=None)
    part = part_view(plan, 1)
    agent = make_agent(tmp_path, "--runtime", "docker", "--cluster-dir", str(tmp_path / "etc-cardmix"),
                       "--authorized-keys", str(tmp_path / "root-keys"), "--rdma-dir", str(rdma_dir(tmp_path)))
    payload = {"instance_id": IID, "kind": "bare_metal", "cards": [], "ssh_keys": ["k"], "image": "",
               "env": {"NCCL_IB_DISABLE": "0", **part["env"]}, "vendor": "nvidia", "collective": "nccl",
               "cluster": part}
    text, code, meta = agent.do_prepare(payload)
    assert code == 0, text
    hostfile = tmp_path / "etc-cardmix" / "hostfile"
    assert hostfile.read_text() == "192.0.2.41 slots=8\n192.0.2.42 slots=8\n"
    env = dict(line.split("=", 1) for line in
               (agent.state_dir / "instances" / IID / "environment").read_text().splitlines())
    assert env["CARDMIX_HOSTFILE"] == str(hostfile) and env["NODE_RANK"] == "1" and env["NCCL_IB_DISABLE"] == "0"
    assert env["MASTER_ADDR"] == "192.0.2.41" and env["NCCL_SOCKET_IFNAME"] == "bond1"
    assert meta["cluster"]["network"] == "host" and docker.calls() == []  # nothing to set up on the host's network
    text, code, _ = agent.do_release({"cards": [], "instance_id": IID})
    assert code == 0, text
    assert not hostfile.exists()


def test_inter_node_runs_each_hosts_own_cards(tmp_path):
    agent = make_agent(tmp_path, "--runtime", "process", "--mpirun", str(BIN / "mpirun"),
                       "--readiness-bin", str(BIN))
    text, code, meta = agent.do_inter_node({"hosts": ["a", "b"], "cards_per_node": 4, "collective": "nccl",
                                            "cards": [[4, 5, 6, 7], [0, 1, 2, 3]]})
    assert code == 0, text
    tool = str(BIN / "all_reduce_perf")
    common = ["CUDA_DEVICE_ORDER=PCI_BUS_ID", tool, "-b", "8G", "-e", "8G", "-f", "2", "-g", "1", "-c", "1"]
    assert meta["argv"] == [str(BIN / "mpirun"), "-np", "4", "-H", "a:4", "env", "CUDA_VISIBLE_DEVICES=4,5,6,7",
                            *common, ":", "-np", "4", "-H", "b:4", "env", "CUDA_VISIBLE_DEVICES=0,1,2,3", *common]


def test_the_probe_passes_between_listening_parts_and_names_one_that_never_answers(tmp_path):
    agent = make_agent(tmp_path, "--runtime", "process")
    base = _free_port_pair()
    parts = [{"part": 0, "address": "127.0.0.1", "probe_port": base, "node_id": "a"},
             {"part": 1, "address": "127.0.0.1", "probe_port": base + 1, "node_id": "a"}]
    payload = {"instance_id": IID, "mode": "host", "parts": parts, "timeout_s": 5,
               "local": [{"part": 0, "name": None}, {"part": 1, "name": None}]}
    text, code, _ = agent.do_reachability(payload)
    assert code == 0, text
    assert f"reach part 0 (127.0.0.1) -> part 1 127.0.0.1:{base + 1} ok" in text
    assert f"reach part 1 (127.0.0.1) -> part 0 127.0.0.1:{base} ok" in text
    # Part 1 never comes up (its node's agent never runs the probe): part 0 says so after its timeout.
    text, code, _ = agent.do_reachability({**payload, "timeout_s": 1, "local": [{"part": 0, "name": None}]})
    assert code == 1
    assert f"reach part 0 (127.0.0.1) -> part 1 127.0.0.1:{base + 1} FAILED ConnectionRefusedError" in text


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter"), reason="nsenter needs root")
def test_docker_probe_runs_inside_each_containers_network_namespace(tmp_path, docker):
    """On a VXLAN network the probe must run where the container's address is: `nsenter -t <its pid> -n`. The fake
    docker answers the agent's own pid (its network namespace), so the exact command runs for real."""
    agent = make_agent(tmp_path, "--runtime", "docker", "--nsenter", shutil.which("nsenter"))
    for name in ("c0", "c1"):
        subprocess.run([str(BIN / "docker"), "run", "-d", "--name", name, "img"], check=True, capture_output=True)
    base = _free_port_pair()
    parts = [{"part": 0, "address": "127.0.0.1", "probe_port": base, "node_id": "a"},
             {"part": 1, "address": "127.0.0.1", "probe_port": base + 1, "node_id": "a"}]
    payload = {"instance_id": IID, "mode": "vxlan", "parts": parts, "timeout_s": 5,
               "local": [{"part": 0, "name": "c0"}, {"part": 1, "name": "c1"}]}
    text, code, _ = agent.do_reachability(payload)
    assert code == 0, text
    assert text.count(" ok ") == 2
    assert sorted(c for c in docker.calls() if c[0] == "inspect") == [
        ["inspect", "-f", "{{.State.Pid}}", "c0"], ["inspect", "-f", "{{.State.Pid}}", "c1"]]
    # A part whose container is gone cannot probe: said, and a failure.
    text, code, _ = agent.do_reachability({**payload, "local": [{"part": 0, "name": "gone"}], "timeout_s": 1})
    assert code == 1 and "part 0: container gone is not running" in text


def _free_port_pair() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", base + 1))
            return base
        except OSError:
            continue


# -- the VXLAN commands, run for real: two network namespaces stand in for two nodes on one fabric ---------------

def _can_make_namespaces() -> bool:
    if os.geteuid() != 0 or not shutil.which("ip"):
        return False
    probe = f"cmxp{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode == 0
    if made:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return made


@pytest.mark.skipif(not _can_make_namespaces(), reason="needs root and network namespaces")
def test_the_vxlan_commands_carry_tcp_between_two_nodes():
    tag = uuid.uuid4().hex[:5]
    hosts = [f"cmxh{tag}a", f"cmxh{tag}b"]
    zone = Zone(slug="z", cluster_network="vxlan", cluster_interface=f"cmxu{tag}")
    h800 = Accelerator(slug="h800-sxm-80g", vendor="nvidia", collective="nccl")
    nodes = [Node(hostname=f"n{i}", zone=zone, accelerator=h800, fabric_address=f"198.51.100.{i + 1}")
             for i in range(2)]
    plan = cluster_plan(kind="container", groups=[NodeGroup(node=n, card_indices=[0, 1]) for n in nodes], slot=7)
    views = [part_view(plan, i) for i in range(2)]

    def sh(*argv, ns=None):
        full = ["ip", "netns", "exec", ns, *argv] if ns else list(argv)
        out = subprocess.run(full, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, f"{full}: {out.stdout}{out.stderr}"
        return out.stdout
    try:
        for ns in hosts:
            sh("ip", "netns", "add", ns)
        # The fabric: one link between the two "nodes", each end named as the zone's cluster NIC.
        sh("ip", "link", "add", f"cmxt{tag}", "type", "veth", "peer", "name", f"cmxs{tag}")
        for end, ns, view in zip((f"cmxt{tag}", f"cmxs{tag}"), hosts, views, strict=True):
            sh("ip", "link", "set", end, "netns", ns)
            sh("ip", "link", "set", end, "name", zone.cluster_interface, ns=ns)
            sh("ip", "addr", "add", f"{view['network']['local']}/24", "dev", zone.cluster_interface, ns=ns)
            sh("ip", "link", "set", zone.cluster_interface, "up", ns=ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
            # What `docker network create` makes: the bridge, named as the plan says, with this node's gateway.
            net = view["network"]
            sh("ip", "link", "add", net["bridge"], "type", "bridge", ns=ns)
            sh("ip", "link", "set", net["bridge"], "up", ns=ns)
            # The part's address (a container's eth0 on that bridge; here the bridge itself holds it).
            sh("ip", "addr", "add", f"{view['address']}/24", "dev", net["bridge"], ns=ns)
            for argv in agent_mod.vxlan_up_argv(net):  # exactly what the agent runs
                sh(*argv, ns=ns)
        probe = ("import socket,sys;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
                 "s.bind((sys.argv[1],29400));s.listen();c,_=s.accept();c.sendall(b'over vxlan');c.close()")
        server = subprocess.Popen(["ip", "netns", "exec", hosts[1], "python3", "-c", probe, views[1]["address"]])
        try:
            client = ("import socket,sys,time\nfor _ in range(50):\n try:\n  c=socket.create_connection((sys.argv[1],"
                      "29400),timeout=2);print(c.recv(20).decode());break\n except OSError:time.sleep(0.1)")
            assert sh("python3", "-c", client, views[1]["address"], ns=hosts[0]).strip() == "over vxlan"
        finally:
            server.kill()
        fdb = sh("bridge", "fdb", "show", "dev", views[0]["network"]["vxlan"], ns=hosts[0])
        assert f"dst {views[1]['network']['local']}" in fdb
        for argv in agent_mod.vxlan_down_argv(views[0]["network"]):
            sh(*argv, ns=hosts[0])
        assert views[0]["network"]["vxlan"] not in sh("ip", "-o", "link", "show", ns=hosts[0])
    finally:
        for ns in hosts:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
