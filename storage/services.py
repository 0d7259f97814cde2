"""Writes of volumes, attachments and dataset mounts (keyword-only, audited, one transaction each).

Provisioning calls the attach/detach/mount services with the instance it has locked and checked (storage never
reads instances): `instance_id` and `zone_id`, and `field` to name in a 400 (the request's field path).
Billing: each live volume has one open meter (subject "volume", instance_id = the volume's id, cards = size in
GiB, rate = µCNY per GiB-hour), so the ordinary meter tick posts its cumulative floor deltas.
"""
import logging
import os

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils.translation import gettext

from billing import services as billing_services
from billing.choices import MeterSubject
from core.dbclock import db_now
from core.errors import NotFoundError, ServiceError, ValidationFailed
from tenancy.audit import audit_record

from .choices import (
    DATASET_MOUNT_PREFIX,
    DEFAULT_DISK_MOUNT,
    METER_LABEL,
    SHARED_MOUNT_PREFIX,
    VolumeKind,
    VolumeState,
)
from .hooks import volume_listeners
from .lock_objects import volume_lock, volumes_lock
from .models import (
    MOUNT_PATH_RE,
    VOLUME_NAME_RE,
    Dataset,
    DatasetMount,
    StoragePrice,
    Volume,
    VolumeAttachment,
)
from .selectors import storage_price_current

logger = logging.getLogger("cardmix.storage")


class VolumeAttached(ServiceError):
    """The volume is mounted somewhere: detach it first (delete), or a disk is already in use (attach)."""

    status, code = 409, "volume_attached"


def _invalid(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, details={field: [message]})


def _notify(event: str, volume: Volume) -> None:
    def run():
        for fn in volume_listeners():
            try:
                fn(event=event, volume=volume)
            except Exception:  # one listener's failure must not hide the change from the others
                logger.exception("volume listener failed", extra={"volume": str(volume.pk), "event": event})
    transaction.on_commit(run)


def _size_check(size_gib, field: str = "size_gib") -> int:
    if isinstance(size_gib, bool) or not isinstance(size_gib, int) or size_gib < 1:
        raise _invalid(field, gettext("A whole number of GiB, at least 1."))
    if size_gib > settings.VOLUME_MAX_GIB:
        raise _invalid(field, gettext("At most %(gib)s GiB.") % {"gib": settings.VOLUME_MAX_GIB})
    return size_gib


def default_mount_path(volume: Volume) -> str:
    """/data for a disk, /mnt/<name> for a shared volume."""
    return DEFAULT_DISK_MOUNT if volume.kind == VolumeKind.DISK else f"{SHARED_MOUNT_PREFIX}{volume.name}"


def _meter_open(volume: Volume, *, rate: int, opened_at=None) -> None:
    billing_services.meter_open(org=volume.organization_id, instance_id=volume.pk, item_index=0,
                                accelerator=METER_LABEL[volume.kind], cards=volume.size_gib, rate=rate,
                                opened_at=opened_at, subject=MeterSubject.VOLUME)


def volume_create(*, org, zone, name: str, kind: str, size_gib: int, actor=None, request=None) -> Volume:
    """Create a volume in `zone` at the zone's current price for its kind and open its meter (402 if the funds do
    not cover FUNDS_MIN_MINUTES of it)."""
    if kind not in VolumeKind.values:
        raise _invalid("kind", gettext("One of %(values)s.") % {"values": ", ".join(VolumeKind.values)})
    if not isinstance(name, str) or not VOLUME_NAME_RE.match(name):
        raise _invalid("name", gettext("Lower-case letters, digits and hyphens, 1–63 characters, not starting or "
                                       "ending with a hyphen."))
    _size_check(size_gib)
    price = storage_price_current(zone=zone, kind=kind)
    billing_services.funds_check(org=org, price_per_hour=size_gib * price.per_gib_hour)
    with transaction.atomic():
        if Volume.objects.filter(organization=org, name=name, deleted_at__isnull=True).exists():
            raise _invalid("name", gettext("A volume named %(name)s exists already.") % {"name": repr(name)})
        try:
            with transaction.atomic():
                volume = Volume.objects.create(organization=org, creator=actor, zone=zone, name=name, kind=kind,
                                               size_gib=size_gib, rate=price.per_gib_hour, state=VolumeState.READY)
        except IntegrityError as exc:  # a concurrent create took the name
            raise _invalid("name", gettext("A volume named %(name)s exists already.") % {"name": repr(name)}) from exc
        _meter_open(volume, rate=price.per_gib_hour)
        audit_record(action="volume.create", org=org, actor=actor, target=volume, request=request,
                     details={"name": name, "kind": kind, "size_gib": size_gib, "zone": zone.slug,
                              "per_gib_hour": price.per_gib_hour})
    return volume


def volume_grow(*, org, volume_id, size_gib: int, actor=None, request=None) -> Volume:
    """Grow a volume online (attached or not; never shrink): its meter is closed at now and reopened with the new
    size at the zone's current price, so every second is billed on the size it had."""
    _size_check(size_gib)
    with transaction.atomic():
        volume = volume_lock(volume_id=volume_id, org=org)
        if size_gib < volume.size_gib:
            raise _invalid("size_gib", gettext("A volume never shrinks: it has %(gib)s GiB.") % {"gib": volume.size_gib})
        if size_gib == volume.size_gib:
            return volume
        price = storage_price_current(zone=volume.zone, kind=volume.kind)
        now = db_now()
        billing_services.meters_close(instance_id=volume.pk, at=now)
        old = volume.size_gib
        volume.size_gib, volume.rate = size_gib, price.per_gib_hour
        volume.over_quota = volume.usage_gib > size_gib
        volume.save(update_fields=["size_gib", "rate", "over_quota", "updated_at"])
        _meter_open(volume, rate=price.per_gib_hour, opened_at=now)
        audit_record(action="volume.grow", org=org, actor=actor, target=volume, request=request,
                     details={"from_gib": old, "to_gib": size_gib, "per_gib_hour": price.per_gib_hour})
        _notify("grown", volume)
    return volume


def _mount_path_check(path, field: str) -> str:
    if not isinstance(path, str) or not MOUNT_PATH_RE.match(path) or os.pardir in path.split("/"):
        raise _invalid(field, gettext("An absolute path such as /data or /mnt/ckpt."))
    if path == "/" or path.startswith(DATASET_MOUNT_PREFIX) or path.split("/")[1] in {
            "bin", "boot", "dev", "etc", "lib", "lib64", "proc", "root", "sbin", "sys", "usr", "var", "run", "tmp"}:
        raise _invalid(field, gettext("%(path)s is reserved.") % {"path": path})
    return path


def volume_attach(*, org, volume_id, instance_id, zone_id, mount_path: str | None = None, actor=None,
                  request=None, field: str = "volume") -> VolumeAttachment:
    """Attach one of the organization's volumes to an instance (which the caller holds locked and found stopped
    or being created). 404 for another organization's volume, 400 naming `field` for another zone, 409
    volume_attached for a disk in use by another instance."""
    with transaction.atomic():
        try:
            volume = volume_lock(volume_id=volume_id, org=org)
        except NotFoundError as exc:
            raise NotFoundError(gettext("Volume not found."), details={field: [gettext("Volume not found.")]}) from exc
        return _attach_locked(volume, org=org, instance_id=instance_id, zone_id=zone_id, mount_path=mount_path,
                              actor=actor, request=request, field=field)


def _attach_locked(volume, *, org, instance_id, zone_id, mount_path, actor, request, field):
    if zone_id is not None and str(volume.zone_id) != str(zone_id):
        raise _invalid(field, gettext("Volume %(name)s is in zone %(zone)s, not the instance's zone.") % {
            "name": volume.name, "zone": volume.zone.slug})
    path_field = field.rsplit(".", 1)[0] + ".mount_path" if "." in field else "mount_path"
    path = _mount_path_check(mount_path or default_mount_path(volume), path_field)
    live = list(VolumeAttachment.objects.live().filter(volume=volume))
    if any(a.instance_id == instance_id for a in live):
        return next(a for a in live if a.instance_id == instance_id)
    if volume.kind == VolumeKind.DISK and live:
        raise VolumeAttached(gettext("Disk %(name)s is attached to another instance; detach it first.") % {
                                 "name": volume.name},
                             details={field: [gettext("attached to another instance")],
                                      "instances": [str(a.instance_id) for a in live]})
    if VolumeAttachment.objects.live().filter(instance_id=instance_id, mount_path=path).exists():
        raise _invalid(path_field, gettext("Another volume is mounted at %(path)s.") % {"path": path})
    attachment = VolumeAttachment.objects.create(volume=volume, instance_id=instance_id, mount_path=path)
    audit_record(action="volume.attach", org=org, actor=actor, target=volume, request=request,
                 details={"instance": str(instance_id), "mount_path": path})
    return attachment


def volumes_attach(*, org, instance_id, zone_id, volumes: list[dict], actor=None, request=None,
                   field: str = "volumes") -> list[VolumeAttachment]:
    """Attach `[{volume, mount_path?}, …]` at instance create, all or none, locking the volumes in pk order."""
    if not volumes:
        return []
    with transaction.atomic():
        locked = volumes_lock([v["volume"] for v in volumes], org=org)
        out = []
        for i, spec in enumerate(volumes):
            volume = locked.get(spec["volume"])
            if volume is None:
                raise NotFoundError(gettext("Volume not found."), details={f"{field}[{i}].volume": [gettext("Volume not found.")]})
            out.append(_attach_locked(volume, org=org, instance_id=instance_id, zone_id=zone_id,
                                      mount_path=spec.get("mount_path"), actor=actor, request=request,
                                      field=f"{field}[{i}].volume"))
        return out


def volume_detach(*, org, volume_id, instance_id, actor=None, request=None) -> None:
    """Detach a volume from an instance (the caller checked the instance may lose it); 404 when not attached."""
    with transaction.atomic():
        volume = volume_lock(volume_id=volume_id, org=org)
        n = VolumeAttachment.objects.live().filter(volume=volume, instance_id=instance_id).update(detached_at=db_now())
        if not n:
            raise NotFoundError(gettext("The volume is not attached to this instance."))
        audit_record(action="volume.detach", org=org, actor=actor, target=volume, request=request,
                     details={"instance": str(instance_id)})


def instance_storage_release(*, org, instance_id, actor=None, request=None) -> int:
    """On terminate: detach every volume and unmount every dataset of the instance; the volumes are kept.
    Returns how many volumes were detached."""
    with transaction.atomic():
        now = db_now()
        ids = list(VolumeAttachment.objects.live().filter(instance_id=instance_id).values_list("volume_id", flat=True))
        VolumeAttachment.objects.live().filter(instance_id=instance_id).update(detached_at=now)
        DatasetMount.objects.live().filter(instance_id=instance_id).update(unmounted_at=now)
        for vid in ids:
            audit_record(action="volume.detach", org=org, actor=actor, target_type="storage.volume", target_id=vid,
                         request=request, details={"instance": str(instance_id), "reason": "instance terminated"})
    return len(ids)


def volume_delete(*, org, volume_id, actor=None, request=None, reason: str = "deleted by the user") -> Volume:
    """Delete a volume and close its meter; 409 volume_attached while it is mounted anywhere."""
    with transaction.atomic():
        volume = volume_lock(volume_id=volume_id, org=org)
        live = list(VolumeAttachment.objects.live().filter(volume=volume).values_list("instance_id", flat=True))
        if live:
            raise VolumeAttached(gettext("Volume %(name)s is attached to %(count)s instance(s); detach it first.") % {
                                     "name": volume.name, "count": len(live)},
                                 details={"instances": [str(i) for i in live]})
        return _delete_locked(volume, actor=actor, request=request, reason=reason)


def _delete_locked(volume, *, actor, request, reason):
    now = db_now()
    billing_services.meters_close(instance_id=volume.pk, at=now)
    volume.state, volume.deleted_at, volume.deleted_reason = VolumeState.DELETED, now, reason[:200]
    volume.save(update_fields=["state", "deleted_at", "deleted_reason", "updated_at"])
    audit_record(action="volume.delete", org=volume.organization, actor=actor, target=volume, request=request,
                 details={"name": volume.name, "size_gib": volume.size_gib, "reason": reason})
    _notify("deleted", volume)
    return volume


def datasets_mount(*, org, instance_id, zone_id, datasets: list, actor=None, request=None,
                   field: str = "datasets") -> list[DatasetMount]:
    """Mount library entries (ids or slugs) read-only at /datasets/<slug>; 400 naming the entry when it is
    unknown or has no copy in the instance's zone. Free of charge."""
    out = []
    with transaction.atomic():
        for i, ref in enumerate(datasets or []):
            name = f"{field}[{i}]"
            ds = (Dataset.objects.filter(active=True, slug=str(ref)).first()
                  or Dataset.objects.filter(active=True, pk=ref if _is_uuid(ref) else None).first())
            if ds is None:
                raise _invalid(name, gettext("No dataset %(ref)s in the library.") % {"ref": repr(ref)})
            if zone_id is not None and not ds.zones.filter(pk=zone_id).exists():
                raise _invalid(name, gettext("%(dataset)s has no copy in the instance's zone.") % {"dataset": ds.slug})
            mount, _ = DatasetMount.objects.get_or_create(dataset=ds, instance_id=instance_id, unmounted_at=None,
                                                          defaults={"organization_id": getattr(org, "pk", org)})
            out.append(mount)
        if out:
            audit_record(action="dataset.mount", org=org, actor=actor, target_type="provisioning.instance",
                         target_id=instance_id, request=request, details={"datasets": [m.dataset.slug for m in out]})
    return out


def _is_uuid(value) -> bool:
    import uuid

    try:
        uuid.UUID(str(value))
        return True
    except ValueError:
        return False


def volume_usage_set(*, volume_id, usage_gib, over_quota: bool | None = None, at=None) -> None:
    """Record a driver's usage report (agent heartbeat, simulated driver); over_quota defaults to usage > size."""
    volume = Volume.objects.filter(pk=volume_id).exclude(state=VolumeState.DELETED).first()
    if volume is None:
        return
    flag = over_quota if over_quota is not None else usage_gib > volume.size_gib
    Volume.objects.filter(pk=volume.pk).update(usage_gib=usage_gib, over_quota=flag, usage_reported_at=at or db_now())


def storage_price_set(*, zone, kind: str, per_gib_hour: int, effective_from=None, actor=None,
                      request=None) -> StoragePrice:
    """Add a price row (the history is kept); volumes lock their rate at create and grow."""
    if kind not in VolumeKind.values:
        raise _invalid("kind", gettext("One of %(values)s.") % {"values": ", ".join(VolumeKind.values)})
    if isinstance(per_gib_hour, bool) or not isinstance(per_gib_hour, int) or per_gib_hour <= 0:
        raise _invalid("per_gib_hour", gettext("A positive whole number of µCNY."))
    with transaction.atomic():
        price = StoragePrice.objects.create(zone=zone, kind=kind, per_gib_hour=per_gib_hour,
                                            effective_from=effective_from or db_now())
        audit_record(action="storage.price_set", actor=actor, target=price, request=request,
                     details={"zone": zone.slug, "kind": kind, "per_gib_hour": per_gib_hour,
                              "effective_from": price.effective_from.isoformat()})
    return price
