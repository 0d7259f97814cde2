"""One cluster per instance on the simulated fleet (task bodies run in this process): every part of a multi-node or
hybrid instance is prepared with the same hostfile and rendezvous, one inter-node run covers all nodes of each vendor,
a hybrid's parts probe each other over TCP, and the instance's /24 is unique while it is placed."""
import re

import pytest

from inventory.models import Node, Zone
from provisioning.choices import ReportScope
from provisioning.models import Instance, NodeGroup, ReadinessReport
from provisioning.services import steps
from provisioning.services.cluster import cluster_slot_ensure
from provisioning.services.fleet import fault_force
from provisioning.tasks import instance_advance
from tests.factories.provisioning import make_fleet

pytestmark = pytest.mark.django_db
URL = "/api/v1/instances/"
IMAGES = {"nvidia": "pytorch-2.3-cuda12.3", "huawei": "cann-torch-npu"}


def _create(client, kind, items) -> str:
    body = {"name": "cluster", "kind": kind, "items": [{"accelerator": a, "count": n} for a, n in items]}
    vendors = {"huawei" if a == "ascend-910b" else "nvidia" for a, _ in items}
    body.update({"images": {v: IMAGES[v] for v in vendors}} if len(vendors) > 1 else {"image": IMAGES[vendors.pop()]})
    r = client.post(URL, body, format="json")
    assert r.status_code == 201, r.json()
    return r.json()["id"]


def _said(text: str) -> dict:
    """The rendezvous a simulated prepare says it set up."""
    m = re.search(r"cluster part (\d+) of (\d+) on \S+: (.*), address (\S+)\nhostfile (\S+): (\d+) host\(s\), "
                  r"WORLD_SIZE (\d+), NODE_RANK (\d+), MASTER_ADDR (\S+)\nhostfile: (.*)\n", text)
    assert m, text
    part, parts, network, address, hostfile, hosts, world, rank, master, lines = m.groups()
    return {"part": int(part), "parts": int(parts), "network": network, "address": address, "hostfile": hostfile,
            "world": int(world), "rank": int(rank), "master": master, "hosts": lines}


def _groups(iid):
    return list(NodeGroup.objects.filter(instance_id=iid).select_related("node").order_by("item_index", "id"))


def test_hybrid_910b_h800_parts_share_one_rendezvous_and_probe_each_other(client):
    make_fleet(ascend=1, h800=1)
    iid = _create(client, "container", [("ascend-910b", 8), ("h800-sxm-80g", 8)])
    assert instance_advance(iid) == "running"
    inst = Instance.objects.get(pk=iid)
    assert inst.cluster_slot == 0
    said = [_said(g.prepare_output) for g in _groups(iid)]
    assert [s["part"] for s in said] == [0, 1] and [s["rank"] for s in said] == [0, 1]
    assert {(s["parts"], s["world"], s["master"], s["hostfile"]) for s in said} == {
        (2, 16, "10.96.0.10:29500", "/etc/cardmix/hostfile")}
    assert [s["address"] for s in said] == ["10.96.0.10", "10.96.0.11"]
    assert all(s["network"].startswith("vxlan cmxvx0 (VNI 100000") for s in said)

    reports = ReadinessReport.objects.filter(instance_id=iid)
    assert sorted(r.scope for r in reports) == ["intra_node", "intra_node", "reachability"]
    probe = reports.get(scope=ReportScope.REACHABILITY)
    assert probe.passed and probe.tool == "tcp" and probe.exit_code == 0
    assert sorted(probe.nodes) == sorted(g.node.hostname for g in _groups(iid))
    assert [(row["from"], row["to"], row["address"], row["port"], row["ok"]) for row in probe.rows] == [
        (0, 1, "10.96.0.11", 29400, True), (1, 0, "10.96.0.10", 29400, True)]
    body = client.get(f"{URL}{iid}/readiness/").json()["results"]
    assert [(r["tool"], r["passed"], r["nodes"]) for r in body if r["tool"] == "tcp"] == [
        ("tcp", True, probe.nodes)]

    page = client.get(f"/instances/{iid}/").content.decode()
    assert f"<strong>tcp</strong> across {', '.join(probe.nodes)} · every part to every other" in page

    assert client.delete(f"{URL}{iid}/").status_code == 202
    steps.instance_terminate_finish(iid)
    assert Instance.objects.get(pk=iid).cluster_slot is None  # the /24 goes back with the cards


def test_two_node_bare_metal_h100_gets_host_addresses_and_one_inter_node_run(client):
    nodes = make_fleet(h100=2)
    for i, node in enumerate(nodes):
        Node.objects.filter(pk=node.pk).update(fabric_address=f"192.0.2.{21 + i}")
    Zone.objects.filter(slug="zone-a").update(cluster_interface="bond1")
    iid = _create(client, "bare_metal", [("h100-sxm-80g", 16)])
    assert instance_advance(iid) == "running"
    said = [_said(g.prepare_output) for g in _groups(iid)]
    assert [(s["address"], s["rank"], s["world"], s["master"]) for s in said] == [
        ("192.0.2.21", 0, 16, "192.0.2.21:29500"), ("192.0.2.22", 1, 16, "192.0.2.21:29500")]
    assert all(s["network"] == "host network on bond1" for s in said)
    assert Instance.objects.get(pk=iid).cluster_slot is None  # bare metal: the hosts' own network, no /24
    inter = ReadinessReport.objects.get(instance_id=iid, scope=ReportScope.INTER_NODE)
    assert inter.passed and inter.tool == "nccl-tests" and sorted(inter.nodes) == sorted(n.hostname for n in nodes)
    assert inter.floor_gbps == 20.0 and "-np 16" in inter.command
    assert "# nThread 1 nGpus 1" in inter.raw_output and inter.raw_output.count("#  Rank") == 16


def test_inter_node_runs_across_all_nodes_of_a_vendor_even_over_two_items(client):
    """Before, the inter-node test ran per item: an H100 item and an H800 item on one node each ran none."""
    make_fleet(h100=1, h800=1, ascend=1)
    iid = _create(client, "container", [("h100-sxm-80g", 4), ("h800-sxm-80g", 4), ("ascend-910b", 4)])
    assert instance_advance(iid) == "running"
    inter = ReadinessReport.objects.get(instance_id=iid, scope=ReportScope.INTER_NODE)
    assert inter.passed and inter.tool == "nccl-tests"
    assert sorted(inter.nodes) == ["h100-zone-a-00.test", "h800-zone-a-00.test"]
    probe = ReadinessReport.objects.get(instance_id=iid, scope=ReportScope.REACHABILITY)
    assert probe.passed and len(probe.rows) == 6  # 3 parts, each to the 2 others


def test_an_unreachable_part_fails_readiness_twice_and_the_instance(client):
    make_fleet(ascend=1, h800=1)
    npu = Node.objects.get(hostname="ascend-zone-a-00.test")
    fault_force(node=npu, operation="reachability", faults=["timeout"], times=2)
    iid = _create(client, "container", [("ascend-910b", 8), ("h800-sxm-80g", 8)])
    assert instance_advance(iid) == "failed"
    probes = ReadinessReport.objects.filter(instance_id=iid, scope=ReportScope.REACHABILITY).order_by("attempt")
    assert [(p.attempt, p.passed, p.exit_code) for p in probes] == [(1, False, 1), (2, False, 1)]
    assert any(e.startswith("unreachable: part 0 -> part 1") for e in probes[0].errors)
    assert "exit_code: 1" in probes[0].errors
    inst = Instance.objects.get(pk=iid)
    assert "cluster reachability" in inst.events.order_by("-created_at").first().reason
    # As with an inter-node failure, no single node is to blame: none is quarantined; the cards are freed.
    assert set(Node.objects.values_list("state", flat=True)) == {"available"}
    assert not NodeGroup.objects.filter(instance_id=iid, released_at__isnull=True).exists()
    assert inst.cluster_slot is None


def test_each_placed_cluster_holds_its_own_slot_and_the_pool_can_run_out(client, settings):
    make_fleet(ascend=2, h800=2)
    first = _create(client, "container", [("ascend-910b", 2), ("h800-sxm-80g", 2)])
    second = _create(client, "container", [("ascend-910b", 2), ("h800-sxm-80g", 2)])
    assert cluster_slot_ensure(instance_id=first) == 0 and cluster_slot_ensure(instance_id=second) == 1
    assert cluster_slot_ensure(instance_id=first) == 0  # kept, not taken again
    Instance.objects.filter(pk=first).update(cluster_slot=None)
    settings.CLUSTER_SUBNET_POOL = "10.96.0.0/23"  # two /24s: slot 0 is free again, slot 1 is held
    third = _create(client, "container", [("ascend-910b", 2), ("h800-sxm-80g", 2)])
    assert cluster_slot_ensure(instance_id=third) == 0
    assert cluster_slot_ensure(instance_id=first) is None  # exhausted
    assert instance_advance(first) == "failed"
    inst = Instance.objects.get(pk=first)
    assert "no free /24 left in CLUSTER_SUBNET_POOL" in inst.events.order_by("-created_at").first().reason
    assert set(Node.objects.values_list("state", flat=True)) == {"available"}  # no node was blamed


def test_a_part_re_placed_during_readiness_makes_every_part_take_the_new_hostfile(client):
    make_fleet(ascend=1, h800=2)
    Zone.objects.filter(slug="zone-a").update(cluster_network="host")
    for i, node in enumerate(Node.objects.order_by("hostname")):
        Node.objects.filter(pk=node.pk).update(fabric_address=f"192.0.2.{51 + i}")
    iid = _create(client, "container", [("ascend-910b", 8), ("h800-sxm-80g", 8)])
    first_gpu = _groups(iid)[1].node
    fault_force(node=first_gpu, operation="readiness", faults=["low_bandwidth"], times=2)
    assert instance_advance(iid) == "running"
    npu_group, gpu_group = _groups(iid)[0], [g for g in _groups(iid) if g.released_at is None][1]
    assert gpu_group.node != first_gpu and Node.objects.get(pk=first_gpu.pk).state == "quarantined"
    hosts = f"{npu_group.node.fabric_address} slots=8, {gpu_group.node.fabric_address} slots=8"
    # The NPU part was prepared again (its first hostfile named the quarantined node) and checked again.
    assert _said(npu_group.prepare_output)["hosts"] == _said(gpu_group.prepare_output)["hosts"] == hosts
    npu_checks = ReadinessReport.objects.filter(instance_id=iid, group=npu_group, scope=ReportScope.INTRA_NODE)
    assert npu_checks.count() == 2 and all(r.passed for r in npu_checks)
    probes = ReadinessReport.objects.filter(instance_id=iid, scope=ReportScope.REACHABILITY)
    assert [p.passed for p in probes] == [True]
    assert probes[0].rows[0]["address"] == gpu_group.node.fabric_address


def test_a_one_part_instance_is_no_cluster(client):
    make_fleet(h100=1)
    iid = _create(client, "container", [("h100-sxm-80g", 8)])
    assert instance_advance(iid) == "running"
    (group,) = _groups(iid)
    assert "cluster part" not in group.prepare_output
    assert Instance.objects.get(pk=iid).cluster_slot is None
    assert not ReadinessReport.objects.filter(instance_id=iid, scope__in=["inter_node", "reachability"]).exists()
