"""Volume kinds and states, dataset kinds."""
from django.db import models
from django.utils.translation import gettext_lazy


class VolumeKind(models.TextChoices):
    """`disk`: one instance at a time, mounted at /data; `shared`: any of the organization's instances in its zone."""

    DISK = "disk", gettext_lazy("Data disk")
    SHARED = "shared", gettext_lazy("Shared volume")


class VolumeState(models.TextChoices):
    """A volume is a row from create to delete; `deleted` rows stay for the audit trail and statements."""

    CREATING = "creating", gettext_lazy("Creating")
    READY = "ready", gettext_lazy("Ready")
    DELETED = "deleted", gettext_lazy("Deleted")


class DatasetKind(models.TextChoices):
    DATASET = "dataset", gettext_lazy("Dataset")
    MODEL = "model", gettext_lazy("Model weights")


DEFAULT_DISK_MOUNT = "/data"
SHARED_MOUNT_PREFIX = "/mnt/"
DATASET_MOUNT_PREFIX = "/datasets/"
# The meter's `accelerator` column names what a volume meter charges for (billing knows no volume).
METER_LABEL = {VolumeKind.DISK: "volume:disk", VolumeKind.SHARED: "volume:shared"}
