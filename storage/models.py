"""Volumes that outlive instances, their attachments, the read-only dataset/model library, storage prices."""
import re
import uuid

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy

from core.money import format_ucny

from .choices import DatasetKind, VolumeKind, VolumeState

# A volume's name is part of a shared volume's mount path (/mnt/<name>) and of its bucket name.
VOLUME_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,61}[a-z0-9]$|^[a-z0-9]$")
MOUNT_PATH_RE = re.compile(r"^/(?:[A-Za-z0-9._-]+/)*[A-Za-z0-9._-]+$")


class Volume(models.Model):
    """A disk or shared volume of one organization in one zone, billed per GiB-hour on its size."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.PROTECT, related_name="volumes")
    creator = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    zone = models.ForeignKey("inventory.Zone", on_delete=models.PROTECT, related_name="volumes")
    name = models.CharField(max_length=63, validators=[RegexValidator(VOLUME_NAME_RE.pattern)])
    kind = models.CharField(max_length=10, choices=VolumeKind.choices)
    size_gib = models.PositiveIntegerField()
    state = models.CharField(max_length=10, choices=VolumeState.choices, default=VolumeState.READY)
    # Reported by the driver (the agent's heartbeats; the simulated driver's plausible figure).
    usage_gib = models.DecimalField(max_digits=14, decimal_places=3, default=0)
    usage_reported_at = models.DateTimeField(null=True, blank=True)
    # Usage above the size where the host enforces no project quota: flagged and shown, never silently cut.
    over_quota = models.BooleanField(default=False)
    # µCNY per GiB-hour locked when its meter opened (create, grow): the price the volume shows.
    rate = models.BigIntegerField(default=0)
    # Retention when the organization cannot pay (services/retention.py): since when, and the warnings sent.
    unpaid_since = models.DateTimeField(null=True, blank=True)
    warned_7d_at = models.DateTimeField(null=True, blank=True)
    warned_1d_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    deleted_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], condition=Q(deleted_at__isnull=True),
                                    name="volume_unique_live_name"),
            models.CheckConstraint(condition=Q(size_gib__gt=0), name="volume_size_positive"),
        ]
        indexes = [
            models.Index(fields=["organization", "-created_at"], name="volume_org_newest"),
            models.Index(fields=["unpaid_since"], condition=Q(unpaid_since__isnull=False, deleted_at__isnull=True),
                         name="volume_unpaid_idx"),
        ]

    def __str__(self):
        return f"{self.name} ({self.kind}, {self.size_gib} GiB)"

    @property
    def price_per_hour(self) -> int:
        """µCNY per hour at the locked rate: size × rate."""
        return self.size_gib * self.rate


class AttachmentQuerySet(models.QuerySet):
    def live(self):
        """The attachments in place now."""
        return self.filter(detached_at__isnull=True)


class MountQuerySet(models.QuerySet):
    def live(self):
        """The dataset mounts in place now."""
        return self.filter(unmounted_at__isnull=True)


class VolumeAttachment(models.Model):
    """A volume mounted into one instance at `mount_path`, from attached_at until detached_at."""

    id = models.BigAutoField(primary_key=True)
    volume = models.ForeignKey(Volume, on_delete=models.PROTECT, related_name="attachments")
    instance_id = models.UUIDField(db_index=True)  # plain id: provisioning sits above storage
    mount_path = models.CharField(max_length=200, validators=[RegexValidator(MOUNT_PATH_RE.pattern)])
    attached_at = models.DateTimeField(auto_now_add=True)
    detached_at = models.DateTimeField(null=True, blank=True)

    objects = AttachmentQuerySet.as_manager()

    class Meta:
        ordering = ["attached_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["volume", "instance_id"], condition=Q(detached_at__isnull=True),
                                    name="attachment_once_per_instance"),
            models.UniqueConstraint(fields=["instance_id", "mount_path"], condition=Q(detached_at__isnull=True),
                                    name="attachment_unique_mount_path"),
        ]
        indexes = [models.Index(fields=["volume"], condition=Q(detached_at__isnull=True), name="attachment_live_idx")]

    def __str__(self):
        return f"{self.volume_id} → {self.instance_id}:{self.mount_path}"


class Dataset(models.Model):
    """An operator-managed, read-only library entry (a dataset or model weights) mounted at /datasets/<slug>."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=120)
    kind = models.CharField(max_length=10, choices=DatasetKind.choices)
    size_gib = models.PositiveIntegerField()
    description = models.TextField(blank=True)
    licence = models.CharField(max_length=300, help_text=gettext_lazy("The licence the users accept by mounting it."))
    # The zones whose storage root holds a copy: only instances there can mount it.
    zones = models.ManyToManyField("inventory.Zone", related_name="datasets", blank=True)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["kind", "slug"]

    def __str__(self):
        return self.slug

    @property
    def mount_path(self) -> str:
        return f"/datasets/{self.slug}"


class DatasetMount(models.Model):
    """A dataset mounted read-only into one instance (free of charge)."""

    id = models.BigAutoField(primary_key=True)
    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="mounts")
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.CASCADE, related_name="+")
    instance_id = models.UUIDField(db_index=True)
    mounted_at = models.DateTimeField(auto_now_add=True)
    unmounted_at = models.DateTimeField(null=True, blank=True)

    objects = MountQuerySet.as_manager()

    class Meta:
        ordering = ["mounted_at", "id"]
        constraints = [models.UniqueConstraint(fields=["dataset", "instance_id"], condition=Q(unmounted_at__isnull=True),
                                               name="dataset_mount_once_per_instance")]

    def __str__(self):
        return f"{self.dataset_id} → {self.instance_id}"


class StoragePrice(models.Model):
    """µCNY per GiB-hour of one volume kind in one zone from `effective_from` (history kept, like card prices)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    zone = models.ForeignKey("inventory.Zone", on_delete=models.PROTECT, related_name="storage_prices")
    kind = models.CharField(max_length=10, choices=VolumeKind.choices)
    per_gib_hour = models.BigIntegerField()
    effective_from = models.DateTimeField()

    class Meta:
        ordering = ["zone", "kind", "-effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["zone", "kind", "effective_from"], name="storage_price_unique_start"),
            models.CheckConstraint(condition=Q(per_gib_hour__gt=0), name="storage_price_positive"),
        ]

    def __str__(self):
        return f"{self.kind} {format_ucny(self.per_gib_hour)} CNY/GiB-hour from {self.effective_from:%Y-%m-%d %H:%M}"


# S3 access keys live with their endpoint code; imported here so the app registry (and migrations) see the model.
from .access_keys import VolumeAccessKey  # noqa: E402, F401
