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
