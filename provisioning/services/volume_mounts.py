"""Volumes on the nodes: what a prepare mounts, and the agents told when a mounted volume grows or is deleted.

storage knows volumes and attachments; provisioning knows which nodes an instance runs on. storage calls back
through its volume listener (storage/hooks.py), hardware through its heartbeat listener (usage): both registered
in provisioning's AppConfig.ready().
"""
import logging

from core.errors import ServiceError
from hardware.models import NodeCredential
from hardware.services import agent_command_enqueue
from storage.access_keys import access_key_list, access_keys_revoke_all
from storage.agent_port import GIB, instance_storage, storage_root, volume_dir, volume_usage_ingest
from storage.models import VolumeAttachment

from ..models import NodeGroup

logger = logging.getLogger("cardmix.provisioning")
AGENT_DRIVERS = ("agent", "redfish")  # nodes whose agent realises volumes (the simulated driver keeps rows)
VOLUME_COMMAND_TIMEOUT_S = 3600  # an agent down for a while still applies a grow when it is back within the hour


def prepare_storage(*, instance, node) -> dict | None:
    """The prepare payload's `storage_root` and `volumes` for the instance on `node` (None: nothing to mount)."""
    return instance_storage(instance_id=instance.pk, zone=node.zone)


def _agent_nodes_of(instance_ids) -> list:
    """The agent-driven nodes the instances run on now (one per node)."""
    return list(NodeGroup.objects.live().filter(instance_id__in=list(instance_ids), node__driver__in=AGENT_DRIVERS)
                .values_list("node_id", flat=True).distinct())


def volume_changed(*, event: str, volume) -> None:
    """storage's volume listener. `grown`: every node the volume is mounted on raises its quota (nothing is
    detached; the next heartbeats report the new size). `deleted`: one registered agent of the zone removes the
    volume's directory from the storage root (the zone's nodes all see the same root)."""
    payload = {"volume_id": str(volume.pk), "dir": volume_dir(volume), "storage_root": storage_root(volume.zone),
               "size_bytes": volume.size_gib * GIB}
    if event == "grown":
        instances = VolumeAttachment.objects.live().filter(volume=volume).values_list("instance_id", flat=True)
        for node_id in _agent_nodes_of(instances):
            agent_command_enqueue(node_id=node_id, kind="volume_grow", payload=payload,
                                  timeout_s=VOLUME_COMMAND_TIMEOUT_S)
    elif event == "deleted":
        if access_key_list(volume=volume).exists():
            try:  # its S3 keys stop working with it
                access_keys_revoke_all(volume=volume)
            except ServiceError:
                logger.exception("volume %s deleted: its S3 access keys could not all be revoked", volume.pk)
        node_id = (NodeCredential.objects.filter(node__zone_id=volume.zone_id, node__driver__in=AGENT_DRIVERS,
                                                 registered_at__isnull=False, revoked_at__isnull=True)
                   .order_by("-last_heartbeat_at").values_list("node_id", flat=True).first())
        if node_id is None:
            logger.warning("volume %s deleted: no agent in zone %s to remove its directory", volume.pk,
                           volume.zone_id)
            return
        agent_command_enqueue(node_id=node_id, kind="volume_delete", payload=payload,
                              timeout_s=VOLUME_COMMAND_TIMEOUT_S)


def heartbeat_volumes(*, node_id, zone_id, report) -> None:
    """hardware's heartbeat listener: the usage each agent reports for the volumes mounted on its node."""
    if report.get("volumes"):
        volume_usage_ingest(node_id=node_id, zone_id=zone_id, report=report)
