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


def short_id(instance_id) -> str:
    """The 8 hex digits an instance is named by at the SSH gateway (`ssh <short id>@<gateway>`)."""
    return str(instance_id)[:8]


def gateway_entry(instance_id, name: str, direct: list[dict]) -> dict | None:
    """The body's `ssh_gateway`: the instance through the platform's SSH gateway, while it has an sshd to reach
    (`direct`, its node entries), and the gateway has a public address."""
    host, port = settings.SSH_GATEWAY_PUBLIC_HOST, settings.SSH_GATEWAY_PUBLIC_PORT
    if not direct or not host:
        return None
    short = short_id(instance_id)
    at = host if port == 22 else f"{host}:{port}"
    # i-<short>: a short id of eight decimal digits would be an IPv4 number to OpenSSH (gateway/access.py).
    config = (f"Host {name}\n  HostName i-{short}\n  User {SSH_USER}\n  ProxyJump {at}\n"
              "  ServerAliveInterval 30\n")
    return {"host": host, "port": port, "user": short,
            "command": f"ssh -p {port} {short}@{host}" if port != 22 else f"ssh {short}@{host}",
            "jump": f"ssh -J {at} {SSH_USER}@i-{short}", "config": config}
