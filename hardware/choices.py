"""Agent command kinds and states."""
from django.db import models
from django.utils.translation import gettext_lazy


class CommandKind(models.TextChoices):
    PREPARE = "prepare", gettext_lazy('Prepare')  # create the container (or set up a bare-metal host) for an instance
    RELEASE = "release", gettext_lazy('Release')  # remove the instance's container
    READINESS = "readiness", gettext_lazy('Readiness')  # all_reduce_perf / all_reduce_test over some cards
    INTER_NODE = "inter_node", gettext_lazy('Inter Node')  # multi-node all_reduce started from this node
    HEALTH_CHECK = "health_check", gettext_lazy('Health Check')  # one-card device health
    TOPOLOGY = "topology", gettext_lazy('Topology')  # nvidia-smi topo -m / npu-smi info -t topo
    WIPE = "wipe", gettext_lazy('Wipe')  # wipe local disks, reset accelerators
    REACHABILITY = "reachability", gettext_lazy('Reachability')  # TCP from this node's parts to the other parts of its cluster
    VOLUME_GROW = "volume_grow", gettext_lazy('Volume Grow')  # raise a mounted volume's quota (nothing detached)
    VOLUME_DELETE = "volume_delete", gettext_lazy('Volume Delete')  # remove a deleted volume's directory from the zone's storage root
    INSTALL_KEYS = "install_keys", gettext_lazy('Install Keys')  # a warm bare-metal node's hand-over: the tenant's keys in root's authorized_keys
    IMAGE_SAVE = "image_save", gettext_lazy('Image Save')  # commit an instance's container and push it to the operator's registry


class CommandState(models.TextChoices):
    QUEUED = "queued", gettext_lazy('Queued')  # waiting for the agent's next poll
    # handed to the agent, no result yet: under a lease until its start is acknowledged (started_at), or for good
    # (an agent before 1.3.0 claims without a lease)
    DELIVERED = "delivered", gettext_lazy('Delivered')
    DONE = "done", gettext_lazy('Done')  # the agent posted text + exit code
    EXPIRED = "expired", gettext_lazy('Expired')  # the driver stopped waiting; a late result is ignored
