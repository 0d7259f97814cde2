"""Reads of volumes, attachments, datasets and storage prices; volumes always scoped to an organization."""
import uuid

from django.db.models import Prefetch, Q
from django.db.models.expressions import RawSQL
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import NotFoundError, ValidationFailed
from core.querysets import ParsedJSONField

from .choices import VolumeState
from .models import Dataset, DatasetMount, StoragePrice, Volume, VolumeAttachment


class StoragePriceMissing(ValidationFailed):
    """No storage price of this kind is in effect in the zone (the operator has not set one)."""


def _uuid(value):
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except (TypeError, ValueError, AttributeError):
        return None


def _live_attachments():
    return Prefetch("attachments", queryset=VolumeAttachment.objects.live().order_by("attached_at", "id"),
                    to_attr="live_attachments")


def volume_list(*, org, zone=None, kind: str | None = None, include_deleted: bool = False):
    """The organization's volumes, newest first, with their live attachments prefetched (`live_attachments`)."""
    qs = Volume.objects.filter(organization=org).select_related("zone").prefetch_related(_live_attachments())
    if not include_deleted:
        qs = qs.exclude(state=VolumeState.DELETED)
    if zone is not None:
        qs = qs.filter(zone=zone)
    if kind:
        qs = qs.filter(kind=kind)
    return qs.order_by("-created_at", "-id")


def volume_get(*, org, volume_id, include_deleted: bool = False) -> Volume:
    """One of the organization's volumes; another organization's (or a malformed) id is 404."""
    pk = _uuid(volume_id)
    volume = None if pk is None else volume_list(org=org, include_deleted=include_deleted).filter(pk=pk).first()
    if volume is None:
        raise NotFoundError(gettext("Volume not found."))
    return volume


def volume_names(*, org, ids) -> dict:
    """{str(volume id): name} of the organization's volumes among `ids`, deleted ones too (statements, usage)."""
    pks = [p for p in (_uuid(i) for i in ids) if p is not None]
    return {str(pk): name for pk, name in Volume.objects.filter(organization=org, pk__in=pks).values_list("pk", "name")}


def volumes_for_instance(*, instance_id) -> list[VolumeAttachment]:
    """The live attachments of an instance, with their volumes (what the driver mounts), by mount path."""
    return list(VolumeAttachment.objects.live().filter(instance_id=instance_id).select_related("volume", "volume__zone")
                .order_by("mount_path"))


def volumes_for_instances(instance_ids) -> dict:
    """{instance id: [live attachment, …]} for a page of instances, in one query."""
    out: dict = {}
    for a in (VolumeAttachment.objects.live().filter(instance_id__in=list(instance_ids)).select_related("volume")
              .order_by("mount_path")):
        out.setdefault(a.instance_id, []).append(a)
    return out


def instance_storage_expressions(instance_id: str, *, org_id) -> dict:
    """volumes_for_instances and datasets_for_instances as JSON for a list's page statement, for the instance whose
    id is the SQL `instance_id` (a column of that statement) of the organization `org_id`: {"volumes": JSON array
    (by mount path), "datasets": JSON array (by slug)}, NULL when none; read a row only when the organization has a
    volume / a mounted dataset at all (checked once a statement). api.serializers.attachment_row_body /
    dataset_row_body build the bodies."""
    volumes = f"""CASE WHEN EXISTS (SELECT 1 FROM storage_volume WHERE organization_id = %s) THEN (
      SELECT json_agg(json_build_object(
        'volume', v.id::text, 'name', v.name, 'kind', v.kind, 'mount_path', a.mount_path, 'size_gib', v.size_gib,
        'usage_gib', v.usage_gib::text, 'over_quota', v.over_quota, 'rate', v.rate, 'attached_at', a.attached_at::text)
        ORDER BY a.mount_path)
      FROM storage_volumeattachment a JOIN storage_volume v ON v.id = a.volume_id
      WHERE a.instance_id = {instance_id} AND a.detached_at IS NULL) END"""
    datasets = f"""CASE WHEN EXISTS (
      SELECT 1 FROM storage_datasetmount WHERE organization_id = %s AND unmounted_at IS NULL) THEN (
      SELECT json_agg(json_build_object('dataset', d.slug, 'name', d.name, 'kind', d.kind,
                                                    'size_gib', d.size_gib) ORDER BY d.slug)
      FROM storage_datasetmount m JOIN storage_dataset d ON d.id = m.dataset_id
      WHERE m.instance_id = {instance_id} AND m.unmounted_at IS NULL) END"""
    return {"volumes": RawSQL(volumes, (org_id,), output_field=ParsedJSONField()),
            "datasets": RawSQL(datasets, (org_id,), output_field=ParsedJSONField())}


def datasets_for_instance(*, instance_id) -> list[DatasetMount]:
    """The datasets mounted read-only into an instance, by slug."""
    return list(DatasetMount.objects.live().filter(instance_id=instance_id).select_related("dataset")
                .order_by("dataset__slug"))


def datasets_for_instances(instance_ids) -> dict:
    """{instance id: [live dataset mount, …]} in one query."""
    out: dict = {}
    for m in (DatasetMount.objects.live().filter(instance_id__in=list(instance_ids)).select_related("dataset")
              .order_by("dataset__slug")):
        out.setdefault(m.instance_id, []).append(m)
    return out


def dataset_list(*, zone=None):
    """The active library entries (all organizations see the same library), with the zones holding a copy."""
    qs = Dataset.objects.filter(active=True).prefetch_related("zones")
    if zone is not None:
        qs = qs.filter(zones=zone)
    return qs.order_by("kind", "slug")


def dataset_get(*, dataset) -> Dataset:
    """An active dataset by id or slug; 404 otherwise."""
    pk = _uuid(dataset)
    found = dataset_list().filter(Q(pk=pk) if pk is not None else Q(slug=str(dataset))).first()
    if found is None:
        raise NotFoundError(gettext("Dataset not found."))
    return found


def storage_price_current(*, zone, kind: str, at=None) -> StoragePrice:
    """The price of a volume kind in a zone in effect at `at` (default now); StoragePriceMissing if none."""
    price = (StoragePrice.objects.filter(zone=zone, kind=kind, effective_from__lte=at or db_now())
             .order_by("-effective_from").first())
    if price is None:
        raise StoragePriceMissing(gettext("No %(kind)s storage price is set in zone %(zone)s.") % {
            "kind": kind, "zone": getattr(zone, "slug", zone)},
                                  details={"zone": getattr(zone, "slug", str(zone)), "kind": kind})
    return price


def storage_prices_current(*, at=None) -> dict:
    """{(zone id, kind): per_gib_hour} in effect now, for the catalog and the quote (one query)."""
    out: dict = {}
    for zone_id, kind, per in (StoragePrice.objects.filter(effective_from__lte=at or db_now())
                               .order_by("zone_id", "kind", "-effective_from")
                               .values_list("zone_id", "kind", "per_gib_hour")):
        out.setdefault((zone_id, kind), per)
    return out


def storage_price_rows(*, at=None) -> list[tuple[str, str, int]]:
    """[(zone slug, kind, per_gib_hour)] in effect now, by zone and kind (one query)."""
    out: dict = {}
    for slug, kind, per in (StoragePrice.objects.filter(effective_from__lte=at or db_now())
                            .order_by("zone__slug", "kind", "-effective_from")
                            .values_list("zone__slug", "kind", "per_gib_hour")):
        out.setdefault((slug, kind), per)
    return [(slug, kind, per) for (slug, kind), per in out.items()]


def storage_price_history(*, zone=None):
    """Every storage price row, newest first per zone and kind (the operator's history)."""
    qs = StoragePrice.objects.select_related("zone")
    return qs.filter(zone=zone) if zone is not None else qs
