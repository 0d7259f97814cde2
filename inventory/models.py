"""The catalog (accelerators, prices, images) and the fleet (zones, nodes, cards, allocations)."""
import uuid

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy

from core.money import format_ucny
from core.querysets import ReleasableQuerySet

from .choices import (
    CardHealth,
    ClusterNetwork,
    Collective,
    CustomImageOrigin,
    CustomImageState,
    FabricKind,
    HolderKind,
    NodeState,
    Vendor,
)


class Accelerator(models.Model):
    """An accelerator type; data, never an enum in code (SPEC §1)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=40, unique=True)
    name = models.CharField(max_length=100)
    vendor = models.CharField(max_length=20, choices=Vendor.choices)
    domestic = models.BooleanField(default=False)
    memory_gb = models.PositiveIntegerField()
    collective = models.CharField(max_length=10, choices=Collective.choices)
    # all_reduce bus bandwidth at the largest size a node group must reach (GB/s).
    readiness_floor_gbps = models.DecimalField(max_digits=7, decimal_places=2, null=True, blank=True)
    orderable = models.BooleanField(default=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self):
        return self.name


class Price(models.Model):
    """µCNY per card-hour from `effective_from`; an instance locks the rate at create/start time."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    accelerator = models.ForeignKey(Accelerator, on_delete=models.PROTECT, related_name="prices")
    on_demand_per_card_hour = models.BigIntegerField()
    # None → floor(on-demand × MONTHLY_DISCOUNT), computed where it is read.
    monthly_per_card_hour = models.BigIntegerField(null=True, blank=True)
    effective_from = models.DateTimeField()

    class Meta:
        ordering = ["accelerator", "-effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["accelerator", "effective_from"], name="price_unique_start"),
            models.CheckConstraint(condition=Q(on_demand_per_card_hour__gt=0), name="price_positive"),
        ]

    def __str__(self):
        return f"{format_ucny(self.on_demand_per_card_hour)} CNY/card-hour from {self.effective_from:%Y-%m-%d %H:%M}"


class Image(models.Model):
    """A machine image and the vendors it runs on."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Image slugs carry versions with dots (pytorch-2.3-cuda12.3), which a SlugField refuses.
    slug = models.CharField(max_length=60, unique=True, validators=[RegexValidator(
        r"^[-a-zA-Z0-9_.]+$", "Letters, digits, dots, hyphens and underscores only.")])
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    vendors = models.JSONField(default=list)  # e.g. ["nvidia"]
    active = models.BooleanField(default=True)
    # The HTTP ports the image serves, reached through the platform's proxy: [{"port": 8888, "name": "JupyterLab"}].
    http_ports = models.JSONField(default=list, blank=True)
    # The port its JupyterLab listens on, started with the platform's token (null: the image ships none).
    jupyter_port = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self):
        return self.slug


class CustomImage(models.Model):
    """An organization's private image: a registry reference checked when registered (digest and architectures
    from the registry), pulled by the nodes with its login (the password or token Fernet-sealed with
    IMAGE_CREDENTIALS_KEY, never shown again); or one saved from a container ("Save as image"), pushed to the
    operator's registry under the organization's namespace and billed per GiB-hour of its size as storage."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.CASCADE, related_name="custom_images")
    creator = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    name = models.CharField(max_length=100)
    reference = models.CharField(max_length=300)  # what docker pulls (saved: <registry>/<org slug>/<name>:<tag>)
    digest = models.CharField(max_length=80, blank=True)  # sha256:… the reference named when checked
    architectures = models.JSONField(default=list, blank=True)  # e.g. ["amd64"]
    vendors = models.JSONField(default=list)  # the accelerators' vendors whose nodes run it, e.g. ["nvidia"]
    origin = models.CharField(max_length=10, choices=CustomImageOrigin.choices, default=CustomImageOrigin.REGISTERED)
    state = models.CharField(max_length=10, choices=CustomImageState.choices, default=CustomImageState.READY)
    state_reason = models.CharField(max_length=1000, blank=True)
    username = models.CharField(max_length=200, blank=True)
    password_encrypted = models.BinaryField(null=True, blank=True)  # never leaves the platform but to a node
    size_bytes = models.BigIntegerField(null=True, blank=True)  # from the registry's manifest
    # Saved images: the container instance it came from, and the zone whose storage price bills it.
    source_instance_id = models.UUIDField(null=True, blank=True)
    zone = models.ForeignKey("inventory.Zone", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["organization", "name"], name="custom_image_unique_name")]

    def __str__(self):
        return self.name

    @property
    def has_credentials(self) -> bool:
        return bool(self.password_encrypted) or bool(self.username)


class Zone(models.Model):
    """One RoCE v2 / InfiniBand fabric; multi-node clusters and hybrids stay inside one."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=40, unique=True)
    name = models.CharField(max_length=100)
    fabric_kind = models.CharField(max_length=12, choices=FabricKind.choices, default=FabricKind.ROCE)
    fabric_gbps = models.PositiveIntegerField(default=200)
    # Inter-node all_reduce bus bandwidth floor for multi-node groups (GB/s).
    inter_node_floor_gbps = models.DecimalField(max_digits=7, decimal_places=2, default=20)
    # The private network the parts of a multi-node or hybrid instance share (bare metal: always the host's).
    cluster_network = models.CharField(max_length=8, choices=ClusterNetwork.choices, default=ClusterNetwork.VXLAN)
    # The nodes' dedicated fabric NIC (e.g. "bond1"): VXLAN underlay, and NCCL/HCCL_SOCKET_IFNAME on the host
    # network. Blank: the route to the peers picks the underlay, and NCCL picks its own interface.
    cluster_interface = models.CharField(max_length=15, blank=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self):
        return self.slug

    @property
    def fabric_label(self) -> str:
        """The fabric as every page writes it: "InfiniBand 400 Gb/s", "RoCE v2 200 Gb/s" (the name says where)."""
        return f"{self.get_fabric_kind_display()} {self.fabric_gbps} Gb/s"


class Node(models.Model):
    """A host with cards of one accelerator type."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    hostname = models.CharField(max_length=200, unique=True)
    zone = models.ForeignKey(Zone, on_delete=models.PROTECT, related_name="nodes")
    accelerator = models.ForeignKey(Accelerator, on_delete=models.PROTECT, related_name="nodes")
    card_count = models.PositiveSmallIntegerField(default=8)
    state = models.CharField(max_length=12, choices=NodeState.choices, default=NodeState.AVAILABLE, db_index=True)
    state_reason = models.CharField(max_length=500, blank=True)
    state_changed_at = models.DateTimeField(auto_now_add=True)
    driver = models.CharField(max_length=20, default="simulated")
    ssh_host = models.CharField(max_length=200, blank=True)
    ssh_port = models.PositiveIntegerField(default=22)
    # The node's address on the zone's fabric NIC (cluster traffic, VXLAN underlay); blank: ssh_host, else hostname.
    fabric_address = models.GenericIPAddressField(null=True, blank=True)
    bmc_address = models.CharField(max_length=300, blank=True)
    # The host's logical CPUs and RAM, divided among its containers in proportion to their cards
    # (provisioning/card_share.py). Set by the operator, or filled in by the agent's first report; empty: no limit.
    cpu_cores = models.PositiveIntegerField(null=True, blank=True, help_text=gettext_lazy("Logical CPUs of the host."))
    memory_mib = models.PositiveIntegerField(null=True, blank=True, help_text=gettext_lazy("RAM of the host in MiB."))
    # A reference to where the BMC credentials are kept; never the secret itself.
    bmc_credentials_ref = models.CharField(max_length=200, blank=True)
    # The cleaning pass that may wipe the node (provisioning/services/cleaning.py): taken under the row
    # lock, cleared when the pass ends, and expiring so that a crashed worker's pass can be taken over.
    clean_claim = models.UUIDField(null=True, blank=True, editable=False)
    clean_claim_until = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["hostname"]
        indexes = [models.Index(fields=["accelerator", "zone", "state"])]

    def __str__(self):
        return self.hostname


class Card(models.Model):
    """One accelerator card in a node."""

    id = models.BigAutoField(primary_key=True)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="cards")
    index = models.PositiveSmallIntegerField()
    health = models.CharField(max_length=10, choices=CardHealth.choices, default=CardHealth.OK)

    class Meta:
        ordering = ["node", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="card_unique_index")]

    def __str__(self):
        return f"{self.node.hostname}#{self.index}"


class CardAllocation(models.Model):
    """Card → holder. At most one live allocation per card (unique while released_at is null);
    provisioning writes these, stock reads them."""

    id = models.BigAutoField(primary_key=True)
    card = models.ForeignKey(Card, on_delete=models.PROTECT, related_name="allocations")
    holder_kind = models.CharField(max_length=12, choices=HolderKind.choices, default=HolderKind.INSTANCE)
    holder_id = models.UUIDField(db_index=True)
    allocated_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)

    objects = ReleasableQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["card"], condition=Q(released_at__isnull=True), name="card_one_live_allocation")
        ]
        indexes = [models.Index(fields=["holder_kind", "holder_id"], condition=Q(released_at__isnull=True),
                                name="live_alloc_by_holder")]

    def __str__(self):
        return f"card {self.card_id} → {self.holder_kind} {self.holder_id}"


class PlacementChange(models.Model):
    """One change to what placement sees on a node, written by database triggers (migration 0008).

    Every insert, delete or relevant update of a node, card or card allocation adds a row here in the
    same transaction, stamped with that transaction's id: a worker's in-memory placement index reads
    the nodes changed since its last look instead of the whole fleet. A row without a node is a marker
    that rows may be gone (a TRUNCATE, or a prune up to row `horizon` and transaction `horizon_xid`):
    a worker that may not have read them rebuilds from scratch. Append-only, so writers never wait on
    each other here.
    """

    id = models.BigAutoField(primary_key=True)
    node_id = models.UUIDField(null=True)  # no foreign key: a deleted node is still named
    xid = models.BigIntegerField()  # pg_current_xact_id() of the writing transaction
    horizon = models.BigIntegerField(null=True)
    horizon_xid = models.BigIntegerField(null=True)
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["xid"], name="placement_change_xid"),
                   # The markers (rows with a horizon) are few: every decision asks whether a new one exists, which
                   # without this index scanned the whole log (0.8 ms at 10k rows, growing until the prune).
                   models.Index(fields=["id"], condition=models.Q(horizon__isnull=False),
                                name="placement_change_marker")]

    def __str__(self):
        return f"node {self.node_id} changed in transaction {self.xid}"
