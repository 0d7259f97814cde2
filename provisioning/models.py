"""Instances, their state history, placement rows, readiness reports and simulated-fault switches."""
import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy

from core.querysets import ReleasableQuerySet

from .choices import (
    BillingMode,
    GroupState,
    InstanceKind,
    InstanceState,
    PackageRenewal,
    RefillState,
    ReportScope,
    RetestCause,
    RetestState,
    WarmState,
    can_transition,
)

# Raw tool output kept per report (SPEC §3: "raw output up to 64 KB").
RAW_OUTPUT_LIMIT = 64 * 1024


class Instance(models.Model):
    """A customer's machine: a card mix of one kind, with its locked rates and lifecycle state."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.PROTECT, related_name="instances")
    creator = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=12, choices=InstanceKind.choices)
    # The chosen mix: [{"accelerator": slug, "count": n, "rate": µCNY per card-hour locked at create/start}].
    items = models.JSONField(default=list)
    # The request's policy when it gave one instead of items (the mix above is what it chose).
    policy = models.JSONField(null=True, blank=True)
    image = models.CharField(max_length=60, blank=True)  # single-image requests
    images = models.JSONField(default=dict)  # {vendor: image slug}, always filled
    ssh_key_ids = models.JSONField(default=list)
    # Copied at create: deleting a key later must not change what the machine was built with.
    ssh_public_keys = models.JSONField(default=list)
    # The platform's own key pair for this instance, Fernet-sealed (platform_keys.py); "" until first prepared.
    platform_key = models.TextField(blank=True, default="", editable=False)
    # HTTP ports the user added beside the image's (http_ports.py): [{"port": 8080, "name": "my app"}].
    http_ports = models.JSONField(default=list, blank=True)
    billing = models.CharField(max_length=10, choices=BillingMode.choices, default=BillingMode.ON_DEMAND)
    package_renewal = models.CharField(max_length=10, choices=PackageRenewal.choices, default=PackageRenewal.STOP)
    waitlist = models.BooleanField(default=False)
    zone = models.ForeignKey("inventory.Zone", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    state = models.CharField(max_length=12, choices=InstanceState.choices, default=InstanceState.PENDING,
                             db_index=True)
    state_reason = models.CharField(max_length=300, blank=True)
    price_per_hour = models.BigIntegerField(default=0)  # µCNY, Σ rate × count at the locked rates
    # SLA window of the latest create/start (or wake-up) request; breach id = sla_event_id.
    sla_deadline = models.DateTimeField(null=True, blank=True)
    sla_event_id = models.UUIDField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    # When the current step must be done by; the reconciler finishes or rolls back past it.
    step_deadline = models.DateTimeField(null=True, blank=True, db_index=True)
    replacements = models.PositiveSmallIntegerField(default=0)
    # The instance's private network while it is placed on several parts (services/cluster.py): its /24 of
    # CLUSTER_SUBNET_POOL and its VXLAN id. Unique among placed instances; freed when its cards are.
    cluster_slot = models.PositiveIntegerField(null=True, blank=True, unique=True)
    waitlisted_at = models.DateTimeField(null=True, blank=True)
    terminated_at = models.DateTimeField(null=True, blank=True)
    # --- SLA, waitlist expiry, retention, reconciler (services/sla.py, expiry.py, reconciler.py) ---
    # The breach id (= sla_event_id) whose SLA outcome was settled, breached or not, and the µCNY granted.
    sla_settled_event_id = models.UUIDField(null=True, blank=True)
    sla_compensation = models.BigIntegerField(default=0)
    # Waitlisted: expiry; stopped: end of retention. Set by every transition (None in other states).
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    # Times the reconciler re-dispatched the current step (reset by every transition).
    step_retries = models.PositiveSmallIntegerField(default=0)
    # --- end SLA ---
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["organization", "state"]),
            # The list's page (newest first) is read straight off this index instead of sorting every row.
            models.Index(fields=["organization", "-created_at", "-id"], name="instance_org_newest"),
        ]

    def __str__(self):
        return f"{self.name} ({self.state})"

    def can_become(self, target: str) -> bool:
        """Whether the transition table allows the current state → target (console buttons ask this)."""
        return can_transition(self.state, target)

    @property
    def card_total(self) -> int:
        """Cards in the mix."""
        return sum(int(item["count"]) for item in self.items)


class InstanceEvent(models.Model):
    """One state change of an instance: from, to, why, who, which request, when."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="events")
    from_state = models.CharField(max_length=12, blank=True)  # "" for the creation event
    to_state = models.CharField(max_length=12)
    reason = models.CharField(max_length=300, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self):
        return f"{self.from_state or '∅'} → {self.to_state}"


class NodeGroup(models.Model):
    """The cards of one node given to one item of an instance (one placement row)."""

    id = models.BigAutoField(primary_key=True)
    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="groups")
    item_index = models.PositiveSmallIntegerField()
    accelerator = models.CharField(max_length=40)  # catalog slug, denormalised for reports
    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="+")
    card_indices = models.JSONField(default=list)
    card_ids = models.JSONField(default=list)
    state = models.CharField(max_length=10, choices=GroupState.choices, default=GroupState.PLACED)
    prepare_attempts = models.PositiveSmallIntegerField(default=0)
    check_attempts = models.PositiveSmallIntegerField(default=0)
    # Wall time spent inside driver calls for this group (seconds): the bench's "time in the driver".
    driver_seconds = models.FloatField(default=0.0)
    prepare_output = models.TextField(blank=True)
    prepare_exit_code = models.IntegerField(null=True, blank=True)
    prepared_at = models.DateTimeField(null=True, blank=True)
    # Set before each prepare call: something may run on the node from then on (a release must reach it).
    prepare_started_at = models.DateTimeField(null=True, blank=True)
    # The node port the container's sshd is published on, as the driver reported it (null: bare metal, or a
    # container on the host network, reached on the node's own ssh_port — e.g. one an older agent started).
    ssh_port = models.PositiveIntegerField(null=True, blank=True)
    # {"8888": 31008}: the node ports this container's HTTP ports were published on at prepare (http_ports.py).
    http_ports = models.JSONField(default=dict, blank=True)
    # The instance's sshd host key on this group (OpenSSH public key line): reported by the driver at prepare, or
    # pinned by the first platform connection (gateway, web terminal); later ones must present it (host_keys.py).
    # Cleared at each prepare: a new container has new keys.
    ssh_host_key = models.TextField(blank=True, default="")
    checked_at = models.DateTimeField(null=True, blank=True)
    # Taken from the warm pool: deployed and verified beforehand, so the boot and image steps were skipped.
    warm = models.BooleanField(default=False)
    # A warm group's hand-over: when the driver installed the instance's keys (Driver.install_keys) on the node.
    keys_installed_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)  # set: a past placement
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ReleasableQuerySet.as_manager()

    class Meta:
        ordering = ["instance", "item_index", "id"]
        indexes = [models.Index(fields=["instance"], condition=Q(released_at__isnull=True), name="live_groups")]

    def __str__(self):
        return f"item {self.item_index} on {self.node_id} cards {self.card_indices}"


class ReadinessReport(models.Model):
    """One readiness run over a node group (or an item's nodes for the inter-node test), parsed."""

    id = models.BigAutoField(primary_key=True)
    # None: a warm-pool node's check (services/warm_pool.py), before any instance holds it.
    instance = models.ForeignKey(Instance, null=True, blank=True, on_delete=models.CASCADE,
                                 related_name="readiness_reports")
    group = models.ForeignKey(NodeGroup, null=True, blank=True, on_delete=models.CASCADE, related_name="reports")
    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="+")
    nodes = models.JSONField(default=list)  # hostnames; more than one for inter-node tests
    scope = models.CharField(max_length=12, choices=ReportScope.choices)
    tool = models.CharField(max_length=30)
    command = models.CharField(max_length=300, blank=True)
    attempt = models.PositiveSmallIntegerField(default=1)
    cards = models.JSONField(default=list)
    rows = models.JSONField(default=list)
    busbw_peak_gbps = models.FloatField(null=True, blank=True)
    busbw_largest_gbps = models.FloatField(null=True, blank=True)
    floor_gbps = models.FloatField(null=True, blank=True)
    errors = models.JSONField(default=list)  # verdict reasons, error lines, parse errors
    passed = models.BooleanField(default=False)
    raw_output = models.TextField(blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    topology = models.TextField(blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()

    class Meta:
        ordering = ["instance", "id"]

    def __str__(self):
        return f"{self.tool} {'passed' if self.passed else 'failed'} (attempt {self.attempt})"


class CardRetest(models.Model):
    """The second pass before quarantine (services/retest.py): released cards that failed readiness or reported
    `degraded`, re-tested once; the evidence an operator reads is both reports."""

    id = models.BigAutoField(primary_key=True)
    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="+")
    # None: a warm-pool node whose check failed (services/warm_pool.py), held by no instance.
    instance = models.ForeignKey(Instance, null=True, blank=True, on_delete=models.CASCADE, related_name="card_retests")
    group = models.ForeignKey(NodeGroup, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    card_ids = models.JSONField(default=list)
    card_indices = models.JSONField(default=list)
    cause = models.CharField(max_length=20, choices=RetestCause.choices)
    state = models.CharField(max_length=10, choices=RetestState.choices, default=RetestState.PENDING, db_index=True)
    # The failed readiness run (None for a card only reported degraded) and the second pass.
    first_report = models.ForeignKey(ReadinessReport, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    second_report = models.ForeignKey(ReadinessReport, null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)  # the claim of the pass running it
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self):
        return f"second pass of {self.node_id} cards {self.card_indices}: {self.state}"


class WarmPool(models.Model):
    """How many whole nodes of one accelerator in one zone to keep deployed with `image` and verified (readiness
    passed within WARM_POOL_MAX_AGE_HOURS), so a bare-metal create skips the boot and image steps (an operator's
    setting; services/warm_pool.py keeps it filled)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    zone = models.ForeignKey("inventory.Zone", on_delete=models.PROTECT, related_name="+")
    accelerator = models.ForeignKey("inventory.Accelerator", on_delete=models.PROTECT, related_name="+")
    size = models.PositiveSmallIntegerField(default=0, help_text=gettext_lazy("Whole nodes to keep warm."))
    image = models.ForeignKey("inventory.Image", on_delete=models.PROTECT, related_name="+",
                              help_text=gettext_lazy("The default image warm nodes are deployed with; a create asking another "
                                        "image boots a cold node."))
    refill_state = models.CharField(max_length=10, choices=RefillState.choices, default=RefillState.IDLE,
                                    editable=False)
    refill_note = models.CharField(max_length=300, blank=True, editable=False)
    refilled_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["zone", "accelerator"]
        constraints = [models.UniqueConstraint(fields=["zone", "accelerator"], name="warm_pool_unique")]

    def __str__(self):
        return f"{self.size} × {self.accelerator} in {self.zone}"


class WarmNode(models.Model):
    """A whole node the pool holds (its cards allocated to this row, holder kind warm_pool) until a create takes
    it; the row goes with the take."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    pool = models.ForeignKey(WarmPool, on_delete=models.CASCADE, related_name="nodes")
    node = models.OneToOneField("inventory.Node", on_delete=models.PROTECT, related_name="+")
    state = models.CharField(max_length=10, choices=WarmState.choices, default=WarmState.PREPARING)
    started_at = models.DateTimeField()  # the current prepare or verification began (a dead worker's is retried)
    prepared_at = models.DateTimeField(null=True, blank=True)
    prepare_output = models.TextField(blank=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    report = models.ForeignKey(ReadinessReport, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["pool", "node"]

    def __str__(self):
        return f"{self.node_id} ({self.state})"


class SimulatedFault(models.Model):
    """Forces simulated-driver faults on a node, across processes (tests and demos; not for real drivers)."""

    class Operation(models.TextChoices):
        PREPARE = "prepare", gettext_lazy('Prepare')
        READINESS = "readiness", gettext_lazy('Readiness')
        HEALTH_CHECK = "health_check", gettext_lazy('Health Check')
        INTER_NODE = "inter_node", gettext_lazy('Inter Node')
        REACHABILITY = "reachability", gettext_lazy('Reachability')
        INSTALL_KEYS = "install_keys", gettext_lazy('Install Keys')

    id = models.BigAutoField(primary_key=True)
    node = models.ForeignKey("inventory.Node", on_delete=models.CASCADE, related_name="+")
    operation = models.CharField(max_length=12, choices=Operation.choices)
    faults = models.JSONField(default=list)  # e.g. ["low_bandwidth"]
    remaining = models.PositiveIntegerField(null=True, blank=True)  # None: every call
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"{self.operation}: {self.faults}"


class DarkEpisode(models.Model):
    """A time a running instance's node stopped heartbeating: its meters closed at `paused_at`, its creator
    emailed, and at `deadline` NODE_DARK_ACTION applies unless the node comes back (services/dark.py)."""

    class Outcome(models.TextChoices):
        RESUMED = "resumed", gettext_lazy('Resumed')  # the node came back in time: meters opened again
        FAILED = "failed", gettext_lazy('Failed')  # NODE_DARK_ACTION=fail (or a move that found no cards)
        MOVED = "moved", gettext_lazy('Moved')  # NODE_DARK_ACTION=move: placed on other cards
        LEFT = "left", gettext_lazy('Left')  # the instance left running another way meanwhile (stopped, terminated)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="dark_episodes")
    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="+")  # the first one dark
    last_heartbeat_at = models.DateTimeField()  # the node agent's last heartbeat: the instance was last seen then
    paused_at = models.DateTimeField()  # last heartbeat + NODE_DARK_GRACE_SECONDS: meters closed at this second
    credited = models.BigIntegerField(default=0)  # µCNY given back for seconds ticks charged after paused_at
    noticed_at = models.DateTimeField()  # DB clock when the sweep saw it
    deadline = models.DateTimeField()  # last heartbeat + NODE_DARK_TIMEOUT_SECONDS (DB clock): the action is due
    emailed_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=8, choices=Outcome.choices, blank=True)

    class Meta:
        ordering = ["noticed_at"]
        constraints = [models.UniqueConstraint(fields=["instance"], condition=Q(ended_at__isnull=True),
                                               name="dark_episode_one_open_per_instance")]

    def __str__(self):
        return f"{self.instance_id} dark since {self.last_heartbeat_at:%Y-%m-%d %H:%M:%S} ({self.outcome or 'open'})"


class HealthIncident(models.Model):
    """A card of a running instance reported degraded or failed by its node's agent (hardware CardSignal): its
    users are told (notice; email when it failed) and, from the failed signal's second, that card is not charged
    (services/health.py). Ends when the instance leaves running: stopped, moved, failed or terminated."""

    class Klass(models.TextChoices):
        DEGRADED = "degraded", gettext_lazy('Degraded')  # charged, flagged on the statement
        FAILED = "failed", gettext_lazy('Failed')  # not charged from failed_at

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="health_incidents")
    card = models.ForeignKey("inventory.Card", on_delete=models.PROTECT, related_name="+")
    item_index = models.PositiveSmallIntegerField()
    klass = models.CharField(max_length=10, choices=Klass.choices)
    detail = models.CharField(max_length=300)  # the signal, as the agent's tool said it
    started_at = models.DateTimeField()  # the first signal's heartbeat (DB clock)
    failed_at = models.DateTimeField(null=True, blank=True)  # the first failed signal's: not charged from then
    rate = models.BigIntegerField(default=0)  # µCNY per card-hour at the instance's locked rate
    credited = models.BigIntegerField(default=0)  # µCNY ticks had charged past failed_at, given back
    uncharged = models.BigIntegerField(default=0)  # what the card's time from failed_at to the end would have cost
    emailed_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=12, blank=True)  # the state the instance left running for

    class Meta:
        ordering = ["started_at"]
        constraints = [models.UniqueConstraint(fields=["instance", "card"], condition=Q(ended_at__isnull=True),
                                               name="health_incident_one_open_per_card")]

    def __str__(self):
        return f"{self.klass} card {self.card_id} of {self.instance_id} ({self.outcome or 'open'})"


class PortShare(models.Model):
    """A link that opens one HTTP port of an instance through the proxy without a console session, until it
    expires or is revoked. Only the secret's SHA-256 is kept: the link is shown once."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="port_shares")
    port = models.PositiveIntegerField()
    secret_hash = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"share of {self.instance_id}:{self.port}"
