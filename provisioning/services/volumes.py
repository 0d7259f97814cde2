"""Attach a volume to a stopped instance, or detach it (the instance row locked; storage does the rest)."""
from django.db import transaction

from tenancy.models import Organization

from ..lock_objects import instance_lock
from . import storage_port


def instance_volume_attach(*, org: Organization, instance_id, volume_id, mount_path=None, actor=None, request=None):
    """409 invalid_state unless stopped (or waitlisted); 404 for another organization's volume; 400 naming
    `volume` for another zone; 409 volume_attached for a disk in use."""
    with transaction.atomic():
        instance = instance_lock(instance_id=instance_id, org=org)
        return storage_port.volume_attach(instance=instance, volume_id=volume_id, mount_path=mount_path, actor=actor,
                                          request=request)


def instance_volume_detach(*, org: Organization, instance_id, volume_id, actor=None, request=None) -> None:
    with transaction.atomic():
        instance = instance_lock(instance_id=instance_id, org=org)
        storage_port.volume_detach(instance=instance, volume_id=volume_id, actor=actor, request=request)
