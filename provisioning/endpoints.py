"""Where a customer's SSH reaches an instance.

Bare metal: the node's own sshd (Node.ssh_host:ssh_port), one entry per node. A container: its own sshd in
its own network, published on the node at CONTAINER_SSH_PORT_BASE + the group's first card index, one entry
per group (an instance may hold two containers on one node). A card is held by one live group at a time, so
two live containers on one node never share a port: no port table, no lock. The body shows the port the
driver reported publishing (NodeGroup.ssh_port), or, before the container is started, the one it will get;
a started container without one (an agent that predates published ports runs it on the host network) is
reached on the node's ssh_port, as before.
"""
from django.conf import settings

from .choices import GroupState, InstanceKind

# Containers and bare metal alike: keys are installed for root (the agent mounts them at
# /root/.ssh/authorized_keys), and a container is the tenant's own to administer.
SSH_USER = "root"


def container_ssh_port(cards) -> int:
    """The node port a container on `cards` publishes its sshd on."""
    return settings.CONTAINER_SSH_PORT_BASE + min(cards)


def ssh_entries(kind: str, groups) -> list[dict]:
    """The body's `ssh` list from live group rows (hostname, ssh_host, ssh_port, container_port, node_id,
    card_indices, state)."""
    entries, seen = [], set()
    for g in groups:
        if kind == InstanceKind.CONTAINER and g.container_port:
            port = g.container_port
        elif kind == InstanceKind.CONTAINER and g.state == GroupState.PLACED and g.card_indices:
            port = container_ssh_port(g.card_indices)  # not started yet: the port it will be published on
        elif g.node_id in seen:
            continue
        else:  # bare metal, or a container on the host network: the node's sshd, one entry per node
            seen.add(g.node_id)
            port = g.ssh_port
        host = g.ssh_host or g.hostname
        entries.append({"node": g.hostname, "host": host, "port": port, "user": SSH_USER,
                        "command": f"ssh -p {port} {SSH_USER}@{host}"})
    return entries
