"""Node credentials per lease: a bare-metal tenant is root where the node token sits, so at release the token
is revoked (it never authenticates again) and the freshly imaged OS gets a new one by enrolling.

- `node_token_revoke` (in the transaction that ends the lease, before cleaning is queued): the token's hash
  moves to RevokedNodeToken, the credential has none; the node's agent is expected silent until it enrolls.
- `node_enroll_issue` (the Redfish driver, just before the one-time deploy boot): a one-time `cmxe_` secret,
  only its sha256 kept, valid for that boot; the driver delivers it through the deploy path (never the node's
  disk, where the tenant was root).
- `node_enroll_exchange` (`POST /api/v1/agent/enroll/`): the deploy image's agent trades the secret, once,
  for a new `cmxn_` token.
- `node_token_refused`: an attempt with a revoked token is audited, once per token per endpoint per minute.
"""
from datetime import timedelta

from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from core.dbclock import db_now
from tenancy.audit import audit_record
from tenancy.models import AuditEvent

from .models import NodeCredential, RevokedNodeToken
from .tokens import (
    ENROLL_SECRET_PREFIX,
    PREFIX_DISPLAY_LEN,
    node_enroll_secret_generate,
    node_token_generate,
    node_token_hash,
)

REFUSED_ACTION = "node.agent_token_refused"
REFUSED_AUDIT_EVERY = timedelta(minutes=1)  # per token and endpoint: an agent retrying forever floods nothing


def token_retire(cred: NodeCredential, *, reason: str) -> None:
    """Remember the credential's current token as refused from now on (call under the credential's lock)."""
    if cred.token_hash:
        RevokedNodeToken.objects.get_or_create(token_hash=cred.token_hash,
                                               defaults={"node_id": cred.node_id, "prefix": cred.prefix,
                                                         "reason": reason})


def node_token_revoke(*, node_id, reason: str = "bare_metal_release") -> bool:
    """Revoke the node's agent token now; False when it has none (never issued, or revoked already)."""
    with transaction.atomic():
        cred = NodeCredential.objects.select_for_update().filter(node_id=node_id).first()
        if cred is None or not cred.token_hash:
            return False
        token_retire(cred, reason=reason)
        prefix = cred.prefix
        cred.token_hash = cred.enroll_hash = cred.enroll_until = None
        cred.registered_at = None
        cred.heartbeat_deadline = None  # silence is expected until the fresh OS enrolls
        cred.save(update_fields=["token_hash", "enroll_hash", "enroll_until", "registered_at",
                                 "heartbeat_deadline"])
        NodeCredential.objects.filter(pk=cred.pk).update(revoked_at=Now())
        audit_record(action="node.agent_token_revoke", target=cred.node,
                     details={"prefix": prefix, "reason": reason, "hostname": cred.node.hostname})
    return True


def node_token_revoked(*, node_id) -> bool:
    """Whether the node has a credential with no valid token (revoked, waiting for its OS to enroll)."""
    return NodeCredential.objects.filter(node_id=node_id, token_hash__isnull=True).exists()


def node_enroll_issue(*, node_id, ttl_s: float) -> str | None:
    """A new one-time enrollment secret for a node whose token is revoked (None when it has a valid one).

    Each call replaces the previous secret: one delivered for an earlier boot that never enrolled is dead."""
    secret = node_enroll_secret_generate()
    with transaction.atomic():
        cred = NodeCredential.objects.select_for_update().filter(node_id=node_id).first()
        if cred is None or cred.token_hash:
            return None
        cred.enroll_hash = node_token_hash(secret)
        cred.enroll_until = db_now() + timedelta(seconds=ttl_s)
        cred.save(update_fields=["enroll_hash", "enroll_until"])
        audit_record(action="node.agent_enroll_issue", target=cred.node,
                     details={"hostname": cred.node.hostname, "valid_s": round(ttl_s)})
    return secret


def node_enroll_exchange(*, secret: str, request=None) -> tuple[NodeCredential, str] | None:
    """Trade a valid, unused enrollment secret for a new node token: (credential, token), or None."""
    if not secret.startswith(ENROLL_SECRET_PREFIX) or len(secret) > 200:
        return None
    token = node_token_generate()
    with transaction.atomic():
        cred = (NodeCredential.objects.select_for_update(of=("self",)).select_related("node")
                .filter(enroll_hash=node_token_hash(secret), token_hash__isnull=True).first())
        if cred is None or cred.enroll_until is None or cred.enroll_until <= db_now():
            return None
        cred.token_hash, cred.prefix = node_token_hash(token), token[:PREFIX_DISPLAY_LEN]
        cred.enroll_hash = cred.enroll_until = cred.revoked_at = None
        cred.registered_at = None  # registers with its first heartbeat
        cred.save(update_fields=["token_hash", "prefix", "enroll_hash", "enroll_until", "revoked_at",
                                 "registered_at"])
        NodeCredential.objects.filter(pk=cred.pk).update(rotated_at=Now())
        audit_record(action="node.agent_enroll", target=cred.node, request=request,
                     details={"hostname": cred.node.hostname, "prefix": cred.prefix})
    return cred, token


def revoked_token_find(secret: str) -> RevokedNodeToken | None:
    return RevokedNodeToken.objects.filter(token_hash=node_token_hash(secret)).first()


def node_token_refused(*, revoked: RevokedNodeToken, endpoint: str, request) -> None:
    """Audit an attempt with a revoked token (node, endpoint, source IP, time), once per token per endpoint per
    minute: under the revoked row's lock, so concurrent attempts record one event, not one each."""
    with transaction.atomic():
        list(RevokedNodeToken.objects.select_for_update().filter(pk=revoked.pk).values_list("pk", flat=True))
        recent = AuditEvent.objects.filter(action=REFUSED_ACTION, target_type="inventory.node",
                                           target_id=str(revoked.node_id), details__prefix=revoked.prefix,
                                           details__endpoint=endpoint,
                                           created_at__gt=timezone.now() - REFUSED_AUDIT_EVERY)
        if recent.exists():
            return
        audit_record(action=REFUSED_ACTION, target_type="inventory.node", target_id=revoked.node_id,
                     request=request,
                     details={"prefix": revoked.prefix, "endpoint": endpoint, "method": request.method,
                              "path": request.path[:200], "reason": revoked.reason,
                              "revoked_at": revoked.revoked_at.isoformat()})


# -- delivery through the deploy path -------------------------------------------------------------------

def enroll_file(hostname: str):
    """Where the secret for the node's next deploy boot is put: NODE_ENROLL_DIR/<hostname> (None: not set).

    The directory belongs to the operator's boot server (PXE/HTTP boot on the provisioning network, or the
    virtual-media image builder), which puts the file's line on that node's deploy kernel command line."""
    from pathlib import Path

    from django.conf import settings

    if not settings.NODE_ENROLL_DIR:
        return None
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in hostname).lstrip(".") or "node"
    return Path(settings.NODE_ENROLL_DIR) / safe


def enroll_deliver(*, hostname: str, secret: str):
    """Write `cardmix.enroll=<secret>` for the node's deploy boot (0600, replaced atomically) → its path."""
    import os
    import tempfile

    target = enroll_file(hostname)
    if target is None:
        raise LookupError("NODE_ENROLL_DIR is not set: no deploy path to hand the node its enrollment secret")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(f"cardmix.enroll={secret}\n")
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


def enroll_withdraw(*, hostname: str) -> None:
    """The boot is over (enrolled or given up): the secret leaves the deploy path."""
    target = enroll_file(hostname)
    if target is not None:
        target.unlink(missing_ok=True)
