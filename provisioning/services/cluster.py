"""One cluster per instance: the private network, hostfile and rendezvous environment of its parts.

A part is one live node group: a container, or a bare-metal node. An instance with two or more parts (multi-node,
hybrid, or two containers on one node) is a cluster: the platform decides every address here and sends each part
its view in the prepare payload (`cluster`); the node agent sets the network up. A Docker network cannot span
hosts, so a zone chooses (Zone.cluster_network):

- `vxlan` (default): a /24 of CLUSTER_SUBNET_POOL per instance, VXLAN id CLUSTER_VNI_BASE + slot over the nodes'
  fabric addresses; on each node one bridge network for the instance's containers (each its own address, eth0
  inside), the node's gateway address distinct per node (the /24 is one L2 segment across the nodes).
- `host`: host networking; a part's address is its node's fabric address. Bare metal always uses this: the
  tenant holds the whole host and its NICs.

Rendezvous environment (torchrun's convention): WORLD_SIZE = total processes = total cards over all parts, NNODES =
parts, NODE_RANK = this part's index (parts ordered by item, then placement), LOCAL_WORLD_SIZE = cards on this
part, MASTER_ADDR = part 0's address.
"""
from __future__ import annotations

import ipaddress

from django.conf import settings
from django.db import IntegrityError, transaction

from inventory.choices import ClusterNetwork

from ..choices import InstanceKind
from ..lock_objects import instance_lock
from ..models import Instance

HOSTFILE_PATH = "/etc/cardmix/hostfile"  # inside every part (the agent mounts or writes it there)
VXLAN_PORT = 4789  # IANA
VXLAN_MTU = 1450  # a 1500-byte underlay less VXLAN's 50 bytes of headers
CONTAINER_IFNAME = "eth0"  # a container on its instance's cluster network has that one interface
FIRST_PART_HOST = 10  # part k is .10+k of the /24; node k's bridge gateway .254-k
MAX_PARTS = 200


def is_cluster(groups) -> bool:
    """Two or more parts need a common network and a rendezvous."""
    return len(groups) >= 2


def _pool() -> ipaddress.IPv4Network:
    return ipaddress.ip_network(settings.CLUSTER_SUBNET_POOL)


def pool_size() -> int:
    """How many /24s the pool holds (instances that can be clusters at once)."""
    return 2 ** max(0, 24 - _pool().prefixlen)


def subnet_of(slot: int) -> ipaddress.IPv4Network:
    """The instance's /24: the pool's slot-th."""
    return ipaddress.ip_network((int(_pool().network_address) + slot * 256, 24))


def cluster_slot_ensure(*, instance_id) -> int | None:
    """The instance's slot, taking the lowest free one on first use; None when the pool is exhausted.

    Each instance locks only its own row, so two may pick the same free slot: the unique constraint settles it and
    the loser takes the next.
    """
    for _ in range(8):
        with transaction.atomic():
            instance = instance_lock(instance_id=instance_id)
            if instance.cluster_slot is not None:
                return instance.cluster_slot
            used = set(Instance.objects.filter(cluster_slot__isnull=False).values_list("cluster_slot", flat=True))
            slot = next((s for s in range(pool_size()) if s not in used), None)
            if slot is None:
                return None
            try:
                with transaction.atomic():
                    Instance.objects.filter(pk=instance_id).update(cluster_slot=slot)
                return slot
            except IntegrityError:
                continue
    return None


def cluster_slot_free(*, instance_id) -> None:
    """Give the slot back once the instance holds no placement (its networks are being removed with it)."""
    Instance.objects.filter(pk=instance_id, cluster_slot__isnull=False).update(cluster_slot=None)


def _underlay(node) -> str:
    return node.fabric_address or node.ssh_host or node.hostname


def cluster_plan(*, kind: str, groups, slot: int | None) -> dict:
    """Every part's address and the shared hostfile (groups: live, in part order, with node, zone, accelerator)."""
    if len(groups) > MAX_PARTS:
        raise ValueError(f"a cluster has at most {MAX_PARTS} parts ({len(groups)} placed)")
    zone = groups[0].node.zone
    mode = ClusterNetwork.HOST if kind == InstanceKind.BARE_METAL else zone.cluster_network
    if mode == ClusterNetwork.VXLAN and slot is None:
        raise ValueError("a VXLAN cluster needs a slot")
    subnet = subnet_of(slot) if mode == ClusterNetwork.VXLAN else None
    nodes = list(dict.fromkeys(g.node for g in groups))
    parts = []
    for index, group in enumerate(groups):
        node = group.node
        cards = list(group.card_indices) or list(range(node.card_count))
        address = str(subnet.network_address + FIRST_PART_HOST + index) if subnet else _underlay(node)
        parts.append({"part": index, "node": node.hostname, "node_id": str(node.pk),
                      "vendor": node.accelerator.vendor, "address": address, "slots": len(cards),
                      "cards": list(group.card_indices),
                      "probe_port": settings.CLUSTER_PROBE_PORT_BASE + min(cards)})
    first_cards = list(groups[0].card_indices) or [0]
    plan = {"mode": str(mode), "interface": zone.cluster_interface, "parts": parts,
            "master_addr": parts[0]["address"], "master_port": settings.CLUSTER_MASTER_PORT_BASE + min(first_cards),
            "world_size": sum(p["slots"] for p in parts), "hostfile_path": HOSTFILE_PATH,
            "hostfile": "".join(f"{p['address']} slots={p['slots']}\n" for p in parts),
            "underlay": {str(n.pk): _underlay(n) for n in nodes}}
    if subnet:
        plan.update(slot=slot, subnet=str(subnet), vni=settings.CLUSTER_VNI_BASE + slot, vxlan_port=VXLAN_PORT,
                    mtu=VXLAN_MTU, gateways={str(n.pk): str(subnet.network_address + 254 - k)
                                             for k, n in enumerate(nodes)})
    return plan


def part_view(plan: dict, index: int) -> dict:
    """What part `index`'s node is sent: the plan, which part it is, and the network its node sets up."""
    me = plan["parts"][index]
    node_id = me["node_id"]
    network: dict = {"mode": plan["mode"], "device": plan["interface"]}
    if plan["mode"] == ClusterNetwork.VXLAN:
        slot = plan["slot"]
        network.update(name=f"cardmix-cluster-{slot}", bridge=f"cmxbr{slot}", vxlan=f"cmxvx{slot}", vni=plan["vni"],
                       port=plan["vxlan_port"], mtu=plan["mtu"], subnet=plan["subnet"],
                       gateway=plan["gateways"][node_id], local=plan["underlay"][node_id],
                       peers=sorted({a for n, a in plan["underlay"].items() if n != node_id}))
    return {"part": index, "address": me["address"], "network": network,
            "parts": plan["parts"], "hostfile": plan["hostfile"], "hostfile_path": plan["hostfile_path"],
            "env": part_env(plan, index)}


def part_env(plan: dict, index: int) -> dict[str, str]:
    """The rendezvous environment of one part, plus NCCL/HCCL's interface for its vendor."""
    me = plan["parts"][index]
    env = {"MASTER_ADDR": plan["master_addr"], "MASTER_PORT": str(plan["master_port"]),
           "WORLD_SIZE": str(plan["world_size"]), "NNODES": str(len(plan["parts"])), "NODE_RANK": str(index),
           "LOCAL_WORLD_SIZE": str(me["slots"]), "CARDMIX_HOSTFILE": plan["hostfile_path"],
           "CARDMIX_CLUSTER_ADDR": me["address"]}
    ifname = CONTAINER_IFNAME if plan["mode"] == ClusterNetwork.VXLAN else plan["interface"]
    if ifname:
        env["GLOO_SOCKET_IFNAME"] = ifname
    if me["vendor"] == "huawei":
        # No rank table: the platform does not know the NPUs' own NIC addresses (hccn_tool); torch_npu's HCCL
        # rendezvous works from MASTER_ADDR/PORT, with HCCL_IF_IP as this part's host-side address.
        env.update(HCCL_IF_IP=me["address"], HCCL_WHITELIST_DISABLE="1")
        if ifname:
            env["HCCL_SOCKET_IFNAME"] = ifname
    elif ifname:
        env["NCCL_SOCKET_IFNAME"] = ifname
    return env


def needs_slot(*, kind: str, groups) -> bool:
    """A cluster of containers in a VXLAN zone: it takes a /24 and a VXLAN id."""
    return (is_cluster(groups) and kind != InstanceKind.BARE_METAL
            and groups[0].node.zone.cluster_network == ClusterNetwork.VXLAN)


def cluster_part(*, instance, group, groups) -> dict | None:
    """`group`'s view of its instance's cluster, or None for a one-part instance (slot taken on first use)."""
    if not is_cluster(groups):
        return None
    vxlan = needs_slot(kind=instance.kind, groups=groups)
    slot = cluster_slot_ensure(instance_id=instance.pk) if vxlan else None
    if vxlan and slot is None:
        raise ClusterPoolExhausted(f"no free /24 left in CLUSTER_SUBNET_POOL ({settings.CLUSTER_SUBNET_POOL})")
    plan = cluster_plan(kind=instance.kind, groups=groups, slot=slot)
    index = next(i for i, g in enumerate(groups) if g.pk == group.pk)
    return part_view(plan, index)


class ClusterPoolExhausted(Exception):
    """Every /24 of the pool belongs to a placed cluster."""
