"""The role × token-scope matrix of SPEC §5, as capabilities that views require.

Capabilities (what a view asks for):
  catalog        read the catalog (accelerators, images)          every role
  read           read instances, SSH keys, quotes, usage…          owner admin member viewer
  read_billing   read balance, ledger, statements, top-ups         owner admin member billing
  read_org       read the organization and its members             every role
  read_audit     read the audit log                                owner admin
  instances      create / stop / start / terminate instances       owner admin member
  ssh_keys       add and delete one's SSH keys                     owner admin member
  tokens         create and revoke one's own API tokens            every role
  billing        top up, submit sponsorship proposals              owner admin billing
  members_manage invite, change roles, remove members              owner admin (admins not owners)
  read_webhooks  read webhook endpoints and their deliveries       owner admin
  read_sign_in   read the sign-in rules (SSO bindings)              owner admin
  sign_in_rules  require MFA, bind an email domain or IdP (SSO)     owner
  webhooks       register, change and delete webhook endpoints      owner admin
A token of scope `read` only reaches the read capabilities of its role.
"""
from rest_framework.permissions import SAFE_METHODS, BasePermission

from .choices import Role

O, A, M, B, V = Role.OWNER, Role.ADMIN, Role.MEMBER, Role.BILLING, Role.VIEWER  # noqa: E741

CAPABILITIES: dict[str, frozenset[str]] = {
    "catalog": frozenset({O, A, M, B, V}),
    "read": frozenset({O, A, M, V}),
    "read_billing": frozenset({O, A, M, B}),
    "read_org": frozenset({O, A, M, B, V}),
    "read_audit": frozenset({O, A}),
    "instances": frozenset({O, A, M}),
    "ssh_keys": frozenset({O, A, M}),
    "tokens": frozenset({O, A, M, B, V}),
    "billing": frozenset({O, A, B}),
    "members_manage": frozenset({O, A}),
    "read_webhooks": frozenset({O, A}),
    "webhooks": frozenset({O, A}),
    "read_sign_in": frozenset({O, A}),
    "sign_in_rules": frozenset({O}),
}
READ_CAPABILITIES = frozenset({"catalog", "read", "read_billing", "read_org", "read_audit", "read_webhooks",
                               "read_sign_in"})


def role_can(role: str, capability: str) -> bool:
    """Whether a role has a capability (ignoring token scope)."""
    return role in CAPABILITIES[capability]


def request_can(request, capability: str) -> bool:
    """Whether this request's membership and credential allow a capability."""
    membership = getattr(request, "membership", None)
    if membership is None or getattr(request, "org", None) is None:
        return False
    if not role_can(membership.role, capability):
        return False
    token = getattr(request, "auth", None)
    scope = getattr(token, "scope", None)
    if scope == "read" and capability not in READ_CAPABILITIES:
        return False
    return True


class RolePermission(BasePermission):
    """Safe methods need `read_cap`, everything else `write_cap` (None = not allowed)."""

    read_cap: str | None = "read"
    write_cap: str | None = None
    message = "Your role or token scope does not allow this."

    def has_permission(self, request, view):
        cap = self.read_cap if request.method in SAFE_METHODS else self.write_cap
        return cap is not None and request_can(request, cap)


def require(read: str | None = "read", write: str | None = None) -> type[RolePermission]:
    """`permission_classes = [require(read="read", write="instances")]`."""
    for cap in (read, write):
        if cap is not None and cap not in CAPABILITIES:
            raise ValueError(f"unknown capability {cap!r}")
    return type(f"Require_{read}_{write}", (RolePermission,), {"read_cap": read, "write_cap": write})


class IsStaff(BasePermission):
    """Operators only (the admin API); an operator's `read` token only reads."""

    message = "Only operators may do this."

    def has_permission(self, request, view):
        user = getattr(request, "user", None)
        if not (user and user.is_authenticated and user.is_staff):
            return False
        scope = getattr(getattr(request, "auth", None), "scope", None)
        return request.method in SAFE_METHODS or scope != "read"
