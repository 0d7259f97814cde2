"""Who may reach which instance through the SSH gateway: the Django side, synchronous (the server calls it in a
thread). A login is a public key registered on the platform; a target is a running instance of an organization
in which that key's owner has a role that may use instances (tenancy/permissions.py); anything else is refused
with a reason the user reads in their ssh client. Another organization's instance is "no such instance"."""
import re
from dataclasses import dataclass

from tenancy.permissions import role_can
from tenancy.selectors import memberships_of_user, ssh_key_active, ssh_keys_by_fingerprint
from tenancy.ssh_keys import fingerprint_of

from .. import selectors
from ..api.rows import group_row_of
from ..choices import InstanceState
from ..endpoints import SSH_USER, ssh_entries
from ..platform_keys import platform_private_key


class Refused(Exception):
    """The reason a connection is refused, as the user sees it."""


@dataclass(frozen=True)
class Login:
    user_id: str
    email: str
    key_id: str
    fingerprint: str


@dataclass(frozen=True)
class Target:
    instance_id: str
    name: str
    org_id: str
    host: str
    port: int
    user: str
    private_key: str  # the instance's platform key (OpenSSH PEM): the gateway's only way in
    group_id: int = 0  # the node group whose sshd this is, and its pinned host key ("" none yet: host_keys.py)
    host_key: str = ""


def logins_for_key(public_blob: bytes) -> list[Login]:
    """The platform users who registered this public key (usually one)."""
    return [Login(str(k.user_id), k.user.email, str(k.pk), k.fingerprint)
            for k in ssh_keys_by_fingerprint(fingerprint=fingerprint_of(public_blob))]


def _usable_org_ids(user_id) -> tuple[set, set]:
    """(organizations where the user may use instances, organizations where the user is any member)."""
    usable, member = set(), set()
    for m in memberships_of_user(user=user_id):
        member.add(m.organization_id)
        if role_can(m.role, "instances"):
            usable.add(m.organization_id)
    return usable, member


# `ssh -J gw root@i-<short id>`: OpenSSH reads an all-digit host ("12345678") as an IPv4 number, so the jump form
# the platform shows prefixes the short id; a bare short id or a name still works.
JUMP_PREFIX = "i-"
# `<instance>-<part>`: the part-th node group (0 the first) of a multi-node instance.
PART_REF = re.compile(r"(?P<ref>.+)-(?P<part>[0-9]{1,3})")


def _found(org_ids, ref: str) -> tuple[list, int]:
    """The instances `ref` names (as a whole first: a name may end in -2), and which of their parts."""
    found = selectors.gateway_instances(org_ids=org_ids, ref=ref)
    if not found and ref.startswith(JUMP_PREFIX):
        return _found(org_ids, ref[len(JUMP_PREFIX):])
    part = PART_REF.fullmatch(ref)
    if found or part is None:
        return found, 0
    return selectors.gateway_instances(org_ids=org_ids, ref=part["ref"]), int(part["part"])


def target_for(logins: list[Login], ref: str) -> tuple[Login, Target]:
    """The instance `ref` names for the first of `logins` that may use it, or Refused. `<ref>-<n>` names part n
    of a multi-node instance (0 is the first, the same as `<ref>`)."""
    ref = (ref or "").strip()
    shown = ref[:64]
    seen_role_refusal = False
    for login in logins:
        usable, member = _usable_org_ids(login.user_id)
        found, part = _found(member, ref)
        allowed = [i for i in found if i.organization_id in usable]
        if found and not allowed:
            seen_role_refusal = True
            continue
        running = [i for i in allowed if i.state == InstanceState.RUNNING]
        allowed = running or allowed  # an old stopped namesake does not hide the running one
        if len(allowed) > 1:
            raise Refused(f"{shown} names more than one instance; use its short id "
                          f"({', '.join(str(i.pk)[:8] for i in allowed)}).")
        if allowed:
            return login, _target(allowed[0], shown, part)
    if seen_role_refusal:
        raise Refused(f"Your role does not allow using instance {shown} (viewers may only look).")
    raise Refused(f"No instance {shown} that you may use.")


def _target(instance, shown: str, part: int = 0) -> Target:
    if instance.state != InstanceState.RUNNING:
        raise Refused(f"Instance {shown} is {instance.state}; it can be reached while running.")
    live = selectors.instance_groups_live(instance=instance)
    if live and part >= len(live):
        raise Refused(f"Instance {shown} has parts 0 to {len(live) - 1} (<instance>-<part>).")
    entries = ssh_entries(instance.kind, [group_row_of(live[part])]) if live else []
    if not entries:
        raise Refused(f"Instance {shown} has no sshd to reach yet.")
    entry, group = entries[0], live[part]
    return Target(str(instance.pk), instance.name, str(instance.organization_id), entry["host"], int(entry["port"]),
                  SSH_USER, platform_private_key(instance), group_id=group.pk, host_key=group.ssh_host_key)


def session_refusal(login: Login, target: Target | None) -> str | None:
    """Why an open session must end now (its key removed, its member removed or demoted, its instance no longer
    running), or None while it may go on."""
    if not ssh_key_active(user_id=login.user_id, key_id=login.key_id):
        return "key removed"
    if target is None:
        return None
    usable, _ = _usable_org_ids(login.user_id)
    if target.org_id not in {str(o) for o in usable}:
        return "no longer a member who may use the instance"
    state = selectors.instance_state_of(instance_id=target.instance_id, org_id=target.org_id)
    if state != InstanceState.RUNNING:
        return f"instance {state or 'gone'}"
    return None
