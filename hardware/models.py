"""Node agent tokens and heartbeats, agent commands, and encrypted BMC credentials."""
import uuid

from django.db import models
from django.db.models import Q

from inventory.models import Node

from .choices import CommandKind, CommandState


class NodeCredential(models.Model):
    """A node agent's token (only its sha256 is kept) and what the agent last reported."""

    id = models.BigAutoField(primary_key=True)
    node = models.OneToOneField("inventory.Node", on_delete=models.CASCADE, related_name="agent_credential")
    # None while revoked: the token a bare-metal tenant could read is revoked at release and the node waits for
    # its freshly imaged OS to enroll (`enroll_hash`, a one-time secret the deploy path delivers) for a new one.
    token_hash = models.CharField(max_length=64, unique=True, null=True, blank=True)
    prefix = models.CharField(max_length=16)  # shown to operators to tell tokens apart
    issued_at = models.DateTimeField(auto_now_add=True)
    rotated_at = models.DateTimeField(null=True, blank=True)
    registered_at = models.DateTimeField(null=True, blank=True)  # first heartbeat with this token
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    # DB-clock deadline of the next heartbeat; None = not expected (never seen, or powered off by us).
    heartbeat_deadline = models.DateTimeField(null=True, blank=True, db_index=True)
    agent_version = models.CharField(max_length=40, blank=True)
    runtime = models.CharField(max_length=20, blank=True)
    # The last heartbeat's report: devices (nvidia-smi / npu-smi), driver versions, health.
    facts = models.JSONField(default=dict, blank=True)
    # The node's state and reason when the heartbeat check marked it unreachable: the returning agent
    # restores them, so a draining or cleaning node does not slip back into the pool.
    resume_state = models.CharField(max_length=12, blank=True)
    resume_reason = models.CharField(max_length=500, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)  # set while no token is valid (waiting to enroll)
    enroll_hash = models.CharField(max_length=64, unique=True, null=True, blank=True)  # sha256 of the cmxe_ secret
    enroll_until = models.DateTimeField(null=True, blank=True)  # DB clock

    def __str__(self):
        return f"agent token {self.prefix}… for node {self.node_id}"


class RevokedNodeToken(models.Model):
    """A node token that no longer authenticates (rotated, or revoked at a bare-metal release): kept so an
    attempt with it is refused as that node's and audited, not just unknown."""

    id = models.BigAutoField(primary_key=True)
    node = models.ForeignKey("inventory.Node", on_delete=models.CASCADE, related_name="revoked_agent_tokens")
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=16)
    reason = models.CharField(max_length=40)  # "rotated" | "bare_metal_release"
    revoked_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"revoked agent token {self.prefix}… of node {self.node_id}"


class AgentCommand(models.Model):
    """One operation for a node's agent; the agent posts back what the node printed (text + exit code)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    node = models.ForeignKey("inventory.Node", on_delete=models.CASCADE, related_name="agent_commands")
    kind = models.CharField(max_length=20, choices=CommandKind.choices)
    payload = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=10, choices=CommandState.choices, default=CommandState.QUEUED)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # Leases (agents from 1.3.0 claim with `?lease=1`): the delivery's id and DB-clock end. Unacknowledged by
    # then, the command goes back to `queued`; the agent's start acknowledgement clears lease_until and sets
    # started_at (never handed out again). lease_id stays null for a delivery without a lease (older agents).
    lease_id = models.UUIDField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField()  # DB clock; the driver gives up after it
    exit_code = models.IntegerField(null=True, blank=True)
    output = models.TextField(blank=True)
    duration_s = models.FloatField(null=True, blank=True)
    meta = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["node", "created_at"], condition=Q(state="queued"),
                                name="agent_cmd_queued_by_node"),
                   models.Index(fields=["node", "lease_until"], condition=Q(state="delivered", lease_until__isnull=False),
                                name="agent_cmd_leased_by_node")]

    def __str__(self):
        return f"{self.kind} on {self.node_id} ({self.state})"


class BmcCredential(models.Model):
    """A BMC login; the password is Fernet-encrypted with BMC_CREDENTIALS_KEY. Node.bmc_credentials_ref = name."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.SlugField(max_length=100, unique=True)
    username = models.CharField(max_length=200)
    password_encrypted = models.BinaryField()
    verify_tls = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name  # never the secret


class CardSignal(models.Model):
    """A degraded or failed health signal an agent reported (hardware/health), once per fingerprint: the evidence
    behind a card's health, for the operator who decides to mark it healthy again. Info and unparsed signals are
    logged, not kept."""

    id = models.BigAutoField(primary_key=True)
    node = models.ForeignKey("inventory.Node", on_delete=models.CASCADE, related_name="health_signals")
    card = models.ForeignKey("inventory.Card", on_delete=models.CASCADE, null=True, blank=True,
                             related_name="health_signals")  # None: the output named no card of this node
    kind = models.CharField(max_length=40)
    code = models.IntegerField(null=True, blank=True)  # the Xid
    klass = models.CharField(max_length=10)  # degraded | failed
    detail = models.CharField(max_length=300)
    fingerprint = models.CharField(max_length=32)
    seen_at = models.DateTimeField()  # DB clock: the heartbeat that first carried it

    class Meta:
        ordering = ["-seen_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["node", "fingerprint"], name="card_signal_once")]

    def __str__(self):
        return f"{self.klass} {self.kind} on card {self.card_id}"


class AgentNode(Node):
    """Proxy of inventory.Node for the agent-token admin (issue / rotate a token, see heartbeats)."""

    class Meta:
        proxy = True
        verbose_name = "node agent"
        verbose_name_plural = "node agents"
