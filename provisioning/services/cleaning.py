"""Node cleaning after a bare-metal instance: cleaning → wipe + health check → available (or maintenance).

The steps call `node_clean_begin(node=...)` inside the transaction that ends a bare-metal instance, BEFORE
it frees the cards, so the node never looks free with a previous tenant's disks. The
`provisioning.node_clean` task then runs `node_clean(node=...)` in a worker, through the node's driver
(the agent wipes disks and resets accelerators; Redfish boots the deploy image for it).

Only one pass wipes: it claims the node (`Node.clean_claim`) under the node's row lock before calling the
driver, and writes its outcome only while the claim is still its own. A second task for the node (a
redelivery while the first still wipes) finds the claim and raises `PassTaken`; the claim expires after
NODE_CLEAN_CLAIM_SECONDS (DB clock), so a pass whose worker died is taken over by a later task.
"""
import logging
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from core.dbclock import db_now
from core.outbox import outbox_send
from hardware.enrollment import node_token_revoke
from hardware.services import node_resume_state, node_resume_state_replace
from inventory.choices import NodeState
from inventory.lock_objects import node_lock
from inventory.models import Node
from inventory.services import node_set_state
from tenancy.models import AuditEvent

from ..readiness import parse_device_health
from .fleet import driver_for, node_ref

logger = logging.getLogger("cardmix.provisioning")

# A node in one of these states returns to `available` after a clean pass; any other state an
# operator set (quarantined, maintenance, unreachable) is restored instead, so cleaning never undoes it.
RETURNS_TO_POOL = (NodeState.AVAILABLE, NodeState.CLEANING)


class PassTaken(Exception):
    """Another live pass holds the node's claim; re-check in `retry_after` seconds (when it expires)."""

    def __init__(self, node_id, retry_after: float):
        super().__init__(f"node {node_id}: another cleaning pass holds it for {retry_after:.0f} s")
        self.retry_after = retry_after


def node_clean_begin(*, node, reason: str = "cleaning after a bare-metal instance") -> Node:
    """Take the node out of the pool now (→ cleaning) and run `node_clean` in a worker after commit."""
    previous = node.state
    # The tenant was root where the node token sits: it never authenticates again. The fresh OS the clean
    # boots enrolls for a new one (hardware/enrollment.py); in this transaction, before the clean is queued.
    node_token_revoke(node_id=node.pk, reason="bare_metal_release")
    node = node_set_state(node=node, state=NodeState.CLEANING, reason=reason)
    # A new pass: a claim left by an earlier one (whose outcome an operator overrode) must not hold it up.
    Node.objects.filter(pk=node.pk).update(clean_claim=None, clean_claim_until=None)
    outbox_send("provisioning.node_clean", args=[str(node.pk), previous])
    return node


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"


def node_clean(*, node, previous_state: str | None = None) -> Node:
    """Wipe local disks and reset accelerators through the node's driver, then health-check every card.

    Pass → `available` (or the operator state it had before, with its reason); fail → `maintenance` with
    the reason. Only a node still `cleaning` is touched: a redelivered task finds it back in the pool,
    maybe with a new tenant, and does nothing; an operator's change during the wipe stands.
    Never raises for driver trouble: the outcome is the node's state and reason. Raises `PassTaken` while
    another pass holds the node.
    """
    node, claim = _claim(node.pk)
    if claim is None:
        return node
    previous = previous_state or NodeState.AVAILABLE
    try:
        driver, ref = driver_for(node), node_ref(node)
        wipe = driver.wipe(ref)
        if not wipe.ok:
            return _fail(node, claim, f"wipe failed (exit {wipe.exit_code}): {_last_line(wipe.text)}")
        for card in range(node.card_count):
            out = driver.health_check(ref, card)
            health = parse_device_health(out.text, out.exit_code)
            if not health.healthy:
                return _fail(node, claim, f"health check of card {card} failed: {', '.join(health.issues)[:300]}")
    except Exception as exc:  # a driver bug must not leave the node in `cleaning` forever
        logger.exception("node cleaning crashed", extra={"node": str(node.pk)})
        return _fail(node, claim, f"cleaning error: {type(exc).__name__}: {str(exc)[:200]}")
    if previous in RETURNS_TO_POOL:
        return _finish(node, claim, NodeState.AVAILABLE, f"cleaned: disks wiped, {node.card_count} card(s) healthy")
    return _finish(node, claim, previous, f"{_reason_before(node, previous)} (cleaned)"[:500])


def _claim(node_id) -> tuple[Node, uuid.UUID | None]:
    """Claim the pass under the node's lock: (node, token), or (node, None) when it is not cleaning."""
    with transaction.atomic():
        node = node_lock(node_id)
        if not _being_cleaned(node):
            logger.info("node cleaning skipped: the node is not cleaning", extra={"node": str(node.pk),
                                                                                  "state": node.state})
            return node, None
        now = db_now()
        if node.clean_claim and node.clean_claim_until > now:
            logger.info("node cleaning skipped: another pass is cleaning the node",
                        extra={"node": str(node.pk), "claim_until": node.clean_claim_until.isoformat()})
            raise PassTaken(node.pk, (node.clean_claim_until - now).total_seconds())
        if node.clean_claim:
            logger.warning("node cleaning takes over an expired claim (its worker died?)",
                           extra={"node": str(node.pk), "claim": str(node.clean_claim)})
        node.clean_claim = uuid.uuid4()
        node.clean_claim_until = now + timedelta(seconds=settings.NODE_CLEAN_CLAIM_SECONDS)
        node.save(update_fields=["clean_claim", "clean_claim_until"])
        return node, node.clean_claim


def _being_cleaned(node: Node) -> bool:
    # Also a cleaning node whose agent missed heartbeats meanwhile: its return restores `cleaning`.
    return node.state == NodeState.CLEANING or node_resume_state(node) == NodeState.CLEANING


def _reason_before(node: Node, previous: str) -> str:
    """The operator's reason for `previous` (drain, maintenance…): the last audited change into it."""
    event = (AuditEvent.objects.filter(target_type=Node._meta.label_lower, target_id=str(node.pk),
                                       action=f"node.{previous}").order_by("-created_at").first())
    reason = str((event.details or {}).get("reason") or "") if event else ""
    return reason.removesuffix(" (cleaned)") or f"{previous} before cleaning"


def _finish(node: Node, claim: uuid.UUID, state: str, reason: str) -> Node:
    """Write the outcome under the node's lock, only while it is still being cleaned by this pass."""
    with transaction.atomic():
        locked = node_lock(node.pk)
        if locked.clean_claim != claim:  # expired and taken over: the newer pass decides
            logger.warning("node cleaning outcome dropped: another pass took the node over",
                           extra={"node": str(node.pk), "outcome": state})
            return locked
        locked.clean_claim = locked.clean_claim_until = None
        locked.save(update_fields=["clean_claim", "clean_claim_until"])
        if locked.state == NodeState.CLEANING:
            return node_set_state(node=locked, state=state, reason=reason)
        if node_resume_state_replace(node_id=locked.pk, expect=NodeState.CLEANING, state=state, reason=reason):
            return locked  # unreachable meanwhile: the agent's return brings this outcome
    logger.warning("node cleaning outcome dropped: the node changed meanwhile",
                   extra={"node": str(node.pk), "state": locked.state, "outcome": state})
    return locked


def _fail(node: Node, claim: uuid.UUID, reason: str) -> Node:
    return _finish(node, claim, NodeState.MAINTENANCE, f"cleaning failed: {reason}")
