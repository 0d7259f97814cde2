"""Vendors, node states and allocation holders of the fleet."""
from django.db import models
from django.utils.translation import gettext_lazy


class Vendor(models.TextChoices):
    NVIDIA = "nvidia", gettext_lazy('Nvidia')
    HUAWEI = "huawei", gettext_lazy('Huawei')
    MOORE_THREADS = "moore_threads", gettext_lazy('Moore Threads')
    ILUVATAR = "iluvatar", gettext_lazy('Iluvatar')


class Collective(models.TextChoices):
    NCCL = "nccl", gettext_lazy('Nccl')
    HCCL = "hccl", gettext_lazy('Hccl')
    MCCL = "mccl", gettext_lazy('Mccl')
    IXCCL = "ixccl", gettext_lazy('Ixccl')


class NodeState(models.TextChoices):
    AVAILABLE = "available", gettext_lazy('Available')
    DRAINING = "draining", gettext_lazy('Draining')
    MAINTENANCE = "maintenance", gettext_lazy('Maintenance')
    QUARANTINED = "quarantined", gettext_lazy('Quarantined')
    CLEANING = "cleaning", gettext_lazy('Cleaning')
    UNREACHABLE = "unreachable", gettext_lazy('Unreachable')
    RETIRED = "retired", gettext_lazy('Retired')


class CardHealth(models.TextChoices):
    OK = "ok", gettext_lazy('Ok')
    DEGRADED = "degraded", gettext_lazy('Degraded')
    FAILED = "failed", gettext_lazy('Failed')


class FabricKind(models.TextChoices):
    INFINIBAND = "infiniband", gettext_lazy("InfiniBand")
    ROCE = "roce", gettext_lazy("RoCE v2")


class ClusterNetwork(models.TextChoices):
    """How the parts of one multi-node or hybrid instance reach each other (a zone setting, docs in README)."""

    VXLAN = "vxlan", gettext_lazy('Vxlan')  # a per-instance VXLAN + Docker network the agents set up over the zone's fabric NICs
    HOST = "host", gettext_lazy('Host')  # host networking on the nodes' dedicated fabric NICs (whole nodes, or trusted tenants)


class HolderKind(models.TextChoices):
    INSTANCE = "instance", gettext_lazy('Instance')
    MAINTENANCE = "maintenance", gettext_lazy('Maintenance')
    WARM_POOL = "warm_pool", gettext_lazy('Warm Pool')  # a whole node kept pre-imaged and verified for bare-metal creates (provisioning)


class CustomImageOrigin(models.TextChoices):
    REGISTERED = "registered", gettext_lazy("Registered")  # by reference, from the organization's registry
    SAVED = "saved", gettext_lazy("Saved from an instance")  # pushed to the operator's registry (IMAGE_SAVE_REGISTRY)


class CustomImageState(models.TextChoices):
    SAVING = "saving", gettext_lazy("Saving")  # the node commits and pushes the container
    READY = "ready", gettext_lazy("Ready")
    FAILED = "failed", gettext_lazy("Failed")


# The CPU architecture (the registry's name for it) of the nodes each vendor's accelerators sit in: a custom image
# must be built for it. Ascend servers are Kunpeng (arm64); the others x86-64.
VENDOR_ARCHITECTURE = {Vendor.NVIDIA: "amd64", Vendor.HUAWEI: "arm64", Vendor.MOORE_THREADS: "amd64",
                       Vendor.ILUVATAR: "amd64"}
