"""Agent command kinds and states."""
from django.db import models


class CommandKind(models.TextChoices):
    PREPARE = "prepare"  # create the container (or set up a bare-metal host) for an instance
    RELEASE = "release"  # remove the instance's container
    READINESS = "readiness"  # all_reduce_perf / all_reduce_test over some cards
    INTER_NODE = "inter_node"  # multi-node all_reduce started from this node
    HEALTH_CHECK = "health_check"  # one-card device health
    TOPOLOGY = "topology"  # nvidia-smi topo -m / npu-smi info -t topo
    WIPE = "wipe"  # wipe local disks, reset accelerators
    REACHABILITY = "reachability"  # TCP from this node's parts to the other parts of its cluster
    VOLUME_GROW = "volume_grow"  # raise a mounted volume's quota (nothing detached)
    VOLUME_DELETE = "volume_delete"  # remove a deleted volume's directory from the zone's storage root
    INSTALL_KEYS = "install_keys"  # a warm bare-metal node's hand-over: the tenant's keys in root's authorized_keys
    IMAGE_SAVE = "image_save"  # commit an instance's container and push it to the operator's registry


class CommandState(models.TextChoices):
    QUEUED = "queued"  # waiting for the agent's next poll
    # handed to the agent, no result yet: under a lease until its start is acknowledged (started_at), or for good
    # (an agent before 1.3.0 claims without a lease)
    DELIVERED = "delivered"
    DONE = "done"  # the agent posted text + exit code
    EXPIRED = "expired"  # the driver stopped waiting; a late result is ignored
