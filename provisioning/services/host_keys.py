"""The writes of the host-key check (provisioning/host_keys.py): pinning a group's key on first use, and the
audit row of a refused connection."""
from django.contrib.auth import get_user_model
from django.db import transaction

from tenancy.audit import audit_record

from ..host_keys import key_line
from ..models import NodeGroup


def host_key_pin(*, group_id, line: str) -> str:
    """Pin `line` as the group's sshd host key unless one is pinned already; the group's key afterwards ("" for a
    released group: nothing is pinned on a past placement)."""
    line = key_line(line)
    if line:
        NodeGroup.objects.live().filter(pk=group_id, ssh_host_key="").update(ssh_host_key=line)
    return NodeGroup.objects.live().filter(pk=group_id).values_list("ssh_host_key", flat=True).first() or ""


def host_key_refused(*, group_id, user_id, via: str, expected: str, offered: str, ip: str | None = None):
    """An `instance.host_key_mismatch` audit row: who tried, through what, which key was expected and offered."""
    group = NodeGroup.objects.select_related("instance__organization", "node").filter(pk=group_id).first()
    if group is None:
        return None
    actor = get_user_model().objects.filter(pk=user_id).first() if user_id else None
    with transaction.atomic():
        return audit_record(action="instance.host_key_mismatch", org=group.instance.organization, actor=actor,
                            target=group.instance, ip=ip,
                            details={"via": via, "node": group.node.hostname, "part": group.item_index,
                                     "expected": expected, "offered": offered})
