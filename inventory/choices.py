"""Vendors, node states and allocation holders of the fleet."""
from django.db import models


class Vendor(models.TextChoices):
    NVIDIA = "nvidia"
    HUAWEI = "huawei"
    MOORE_THREADS = "moore_threads"
    ILUVATAR = "iluvatar"


class Collective(models.TextChoices):
    NCCL = "nccl"
    HCCL = "hccl"
    MCCL = "mccl"
    IXCCL = "ixccl"


class NodeState(models.TextChoices):
    AVAILABLE = "available"
    DRAINING = "draining"
    MAINTENANCE = "maintenance"
    QUARANTINED = "quarantined"
    CLEANING = "cleaning"
    UNREACHABLE = "unreachable"
    RETIRED = "retired"


class CardHealth(models.TextChoices):
    OK = "ok"
    DEGRADED = "degraded"
    FAILED = "failed"


class FabricKind(models.TextChoices):
    INFINIBAND = "infiniband", "InfiniBand"
    ROCE = "roce", "RoCE v2"


class ClusterNetwork(models.TextChoices):
    """How the parts of one multi-node or hybrid instance reach each other (a zone setting, docs in README)."""

    VXLAN = "vxlan"  # a per-instance VXLAN + Docker network the agents set up over the zone's fabric NICs
    HOST = "host"  # host networking on the nodes' dedicated fabric NICs (whole nodes, or trusted tenants)


class HolderKind(models.TextChoices):
    INSTANCE = "instance"
    MAINTENANCE = "maintenance"
    WARM_POOL = "warm_pool"  # a whole node kept pre-imaged and verified for bare-metal creates (provisioning)


class CustomImageOrigin(models.TextChoices):
    REGISTERED = "registered", "Registered"  # by reference, from the organization's registry
    SAVED = "saved", "Saved from an instance"  # pushed to the operator's registry (IMAGE_SAVE_REGISTRY)


class CustomImageState(models.TextChoices):
    SAVING = "saving", "Saving"  # the node commits and pushes the container
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


# The CPU architecture (the registry's name for it) of the nodes each vendor's accelerators sit in: a custom image
# must be built for it. Ascend servers are Kunpeng (arm64); the others x86-64.
VENDOR_ARCHITECTURE = {Vendor.NVIDIA: "amd64", Vendor.HUAWEI: "arm64", Vendor.MOORE_THREADS: "amd64",
                       Vendor.ILUVATAR: "amd64"}
