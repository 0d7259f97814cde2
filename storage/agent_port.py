"""What the nodes see of storage: the prepare payload's volumes and datasets, and their usage from heartbeats.

A zone's volumes live on its storage root, which the operator mounts at the same path on every node of the zone
(`STORAGE_ROOTS[zone slug]`, else `STORAGE_ROOT`): a volume is `volumes/<id>`, a dataset's copy `datasets/<slug>`.
"""
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models.functions import Now

from .choices import VolumeState
from .models import Volume
from .selectors import datasets_for_instance, volumes_for_instance

GIB = 1024 ** 3


def storage_root(zone) -> str:
    """The zone's storage root on its nodes."""
    return settings.STORAGE_ROOTS.get(getattr(zone, "slug", str(zone))) or settings.STORAGE_ROOT


def volume_dir(volume) -> str:
    return f"volumes/{volume.pk}"


def instance_storage(*, instance_id, zone) -> dict | None:
    """`{"storage_root", "volumes": [...]}` for a prepare of the instance: its live attachments (read-write, their
    size as the quota) and datasets (read-only at /datasets/<slug>); None when it has neither."""
    entries = [{"id": str(a.volume_id), "kind": a.volume.kind, "dir": volume_dir(a.volume), "mount_path": a.mount_path,
                "read_only": False, "size_bytes": a.volume.size_gib * GIB}
               for a in volumes_for_instance(instance_id=instance_id)]
    entries += [{"id": m.dataset.slug, "kind": "dataset", "dir": f"datasets/{m.dataset.slug}",
                 "mount_path": m.dataset.mount_path, "read_only": True, "size_bytes": None}
                for m in datasets_for_instance(instance_id=instance_id)]
    return {"storage_root": storage_root(zone), "volumes": entries} if entries else None


def volume_usage_ingest(*, node_id, zone_id, report: dict) -> int:
    """A heartbeat's `volumes` into the volumes' usage: only the node's own zone's live volumes (a node cannot
    write another zone's figures); over its size is flagged. → rows updated"""
    updated = 0
    for entry in report.get("volumes") or []:
        try:
            used = int(entry["used_bytes"])
            pk = str(entry["id"])
            volume = Volume.objects.filter(pk=pk, zone_id=zone_id).exclude(state=VolumeState.DELETED).only(
                "size_gib").first()
        except (KeyError, TypeError, ValueError, DjangoValidationError):  # a malformed id: not a volume
            continue
        if volume is None:
            continue
        usage = (Decimal(used) / GIB).quantize(Decimal("0.001"))
        updated += Volume.objects.filter(pk=volume.pk).update(
            usage_gib=usage, over_quota=used > volume.size_gib * GIB, usage_reported_at=Now())
    return updated
