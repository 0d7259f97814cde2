"""Reads of the real-hardware paths: token lookup, BMC logins, nodes flagged unreachable."""
from dataclasses import dataclass

from inventory.choices import HolderKind, NodeState
from inventory.models import CardAllocation

from .bmc_secrets import bmc_decrypt
from .models import BmcCredential, CardSignal, NodeCredential
from .tokens import NODE_TOKEN_PREFIX, node_token_hash


def node_credential_authenticate(*, secret: str) -> NodeCredential | None:
    """The credential a `cmxn_` secret belongs to (None when unknown or rotated away)."""
    if not secret.startswith(NODE_TOKEN_PREFIX) or len(secret) > 200:
        return None
    return NodeCredential.objects.select_related("node").filter(token_hash=node_token_hash(secret)).first()


@dataclass(frozen=True)
class BmcLogin:
    """Where and how to reach a node's BMC. `repr` hides the password so it never reaches a log."""

    address: str
    username: str
    password: str
    verify_tls: bool

    def __repr__(self) -> str:
        return f"BmcLogin(address={self.address!r}, username={self.username!r}, password='***')"


def bmc_credentials_missing(names) -> set:
    """Those of `names` that no BMC credential has (inventory's lookup hook: node refs are checked when written)."""
    names = set(names)
    return names - set(BmcCredential.objects.filter(name__in=names).values_list("name", flat=True))


def bmc_login_for_node(node) -> BmcLogin:
    """The node's BMC address and decrypted login (Node.bmc_credentials_ref = BmcCredential.name).

    Raises LookupError (no reference / unknown name) or ValueError (wrong BMC_CREDENTIALS_KEY).
    """
    if not node.bmc_address:
        raise LookupError(f"{node.hostname}: no BMC address configured")
    cred = BmcCredential.objects.filter(name=node.bmc_credentials_ref).first() if node.bmc_credentials_ref else None
    if cred is None:
        raise LookupError(f"{node.hostname}: BMC credential {node.bmc_credentials_ref!r} not found")
    return BmcLogin(address=node.bmc_address, username=cred.username, password=bmc_decrypt(cred.password_encrypted),
                    verify_tls=cred.verify_tls)


def unreachable_instance_ids() -> set:
    """Instances holding live cards on unreachable nodes (the flag the provisioning side can read)."""
    return set(CardAllocation.objects.live().filter(holder_kind=HolderKind.INSTANCE,
                                             card__node__state=NodeState.UNREACHABLE)
               .values_list("holder_id", flat=True))


def dark_nodes(node_ids=None, *, silent: bool = False) -> dict:
    """{node id: its agent's last heartbeat (None: never)} of the nodes the heartbeat check marked unreachable (not
    an operator), among `node_ids` (all when None): the ones whose instances are told and not billed.

    `silent` also counts an agent node whose heartbeat deadline has passed in any state (not marked yet, or an
    operator quarantined it while dark): the node is back only once its agent heartbeats again."""
    from django.db.models import Q
    from django.db.models.functions import Now

    from .services import UNREACHABLE_REASON

    dark = Q(node__state=NodeState.UNREACHABLE, node__state_reason__startswith=UNREACHABLE_REASON)
    if silent:
        dark |= Q(heartbeat_deadline__lt=Now())
    creds = NodeCredential.objects.filter(dark)
    if node_ids is not None:
        creds = creds.filter(node_id__in=list(node_ids))
    return dict(creds.values_list("node_id", "last_heartbeat_at"))


def agent_token_issued(*, node_id) -> bool:
    """Whether the node was ever given an agent token (a revoked one included)."""
    return NodeCredential.objects.filter(node_id=node_id).exists()


def card_signal_first(*, card_id, klass: str, since):
    """The card's first kept signal of `klass` seen at or after `since` (DB clock), or None: what a card health
    listener would have acted on (provisioning's health sweep reads it when the listener failed)."""
    return (CardSignal.objects.filter(card_id=card_id, klass=klass, seen_at__gte=since)
            .order_by("seen_at", "pk").first())
