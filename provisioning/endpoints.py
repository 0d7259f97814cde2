"""Where a customer's SSH reaches an instance.

Bare metal: the node's own sshd (Node.ssh_host:ssh_port), one entry per node. A container: its own sshd
in its own network namespace, published on the node at CONTAINER_SSH_PORT_BASE + the group's first card
index, one entry per group (an instance may hold two containers on one node). A card is held by one live
group at a time, so two live containers on one node never share a port: no port table, no lock.
"""
from django.conf import settings

from .choices import InstanceKind


def container_ssh_port(cards) -> int:
    """The node port a container on `cards` publishes its sshd on."""
    return settings.CONTAINER_SSH_PORT_BASE + min(cards)


def ssh_user(kind: str) -> str:
    # Bare metal hands over the whole OS; a container runs as an unprivileged user.
    return "root" if kind == InstanceKind.BARE_METAL else "cardmix"


def ssh_entries(kind: str, groups) -> list[dict]:
    """The body's `ssh` list from live group rows (hostname, ssh_host, ssh_port, node_id, card_indices)."""
    user, entries, seen = ssh_user(kind), [], set()
    container = kind != InstanceKind.BARE_METAL
    for g in groups:
        if container and g.card_indices:
            port = container_ssh_port(g.card_indices)
        elif g.node_id in seen:
            continue
        else:
            port = g.ssh_port
        seen.add(g.node_id)
        host = g.ssh_host or g.hostname
        entries.append({"node": g.hostname, "host": host, "port": port, "user": user,
                        "command": f"ssh -p {port} {user}@{host}"})
    return entries
