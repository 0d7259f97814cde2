"""Volume kinds and states, dataset kinds."""
from django.db import models


class VolumeKind(models.TextChoices):
    """`disk`: one instance at a time, mounted at /data; `shared`: any of the organization's instances in its zone."""

    DISK = "disk", "Data disk"
    SHARED = "shared", "Shared volume"


class VolumeState(models.TextChoices):
    """A volume is a row from create to delete; `deleted` rows stay for the audit trail and statements."""

    CREATING = "creating", "Creating"
    READY = "ready", "Ready"
    DELETED = "deleted", "Deleted"


class DatasetKind(models.TextChoices):
    DATASET = "dataset", "Dataset"
    MODEL = "model", "Model weights"


DEFAULT_DISK_MOUNT = "/data"
SHARED_MOUNT_PREFIX = "/mnt/"
DATASET_MOUNT_PREFIX = "/datasets/"
# The meter's `accelerator` column names what a volume meter charges for (billing knows no volume).
METER_LABEL = {VolumeKind.DISK: "volume:disk", VolumeKind.SHARED: "volume:shared"}
