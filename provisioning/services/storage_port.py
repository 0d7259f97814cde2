"""The calls provisioning makes into storage, in one place (storage sits below provisioning).

Volumes pin an instance to their zone: at create the volumes' zone becomes the instance's (placement searches only
there), and a zone the request named must be theirs (400 naming the volume's field otherwise). Datasets need a
copy in the instance's zone. Everything is attached in the create's transaction, so a refusal keeps nothing.
"""
from dataclasses import replace

from django.utils.translation import gettext

from core.errors import NotFoundError, ValidationFailed
from inventory.models import Zone
from storage import selectors as storage_selectors
from storage import services as storage_services
from storage.api.serializers import attachment_body, attachment_row_body, dataset_mount_body, dataset_row_body
from storage.models import Dataset
from storage.selectors import volume_get

from ..choices import InstanceState as S
from .specs import InstanceSpec

# A volume is attached to, or detached from, an instance only while nothing runs on it (no hot-plug of a mount
# into a running container): stopped, or not placed yet / waiting for cards.
ATTACHABLE_STATES = (S.STOPPED, S.WAITLISTED)


def _invalid(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, details={field: [message]})


def create_spec_zone(*, org, spec: InstanceSpec, volumes: list[dict], datasets: list) -> InstanceSpec:
    """The spec with the zone its volumes (or datasets) pin it to; 404 for a volume that is not the organization's,
    400 naming the field for a zone mismatch. Reads only: the create locks and attaches later."""
    zone_slug, zone_from = spec.zone, "zone"
    for i, entry in enumerate(volumes):
        field = f"volumes[{i}].volume"
        try:
            volume = volume_get(org=org, volume_id=entry["volume"])
        except NotFoundError as exc:
            raise NotFoundError(gettext("Volume not found."), details={field: [gettext("Volume not found.")]}) from exc
        if zone_slug is None:
            zone_slug, zone_from = volume.zone.slug, field
        elif volume.zone.slug != zone_slug:
            raise _invalid(field, f"Volume {volume.name} is in zone {volume.zone.slug}, but {zone_from} is "
                                  f"{zone_slug}: an instance and its volumes share one zone.")
    if datasets:
        holding = None
        for i, ref in enumerate(datasets):
            try:
                ds = storage_selectors.dataset_get(dataset=ref)
            except NotFoundError as exc:
                raise _invalid(f"datasets[{i}]", f"No dataset {ref!r} in the library.") from exc
            zones = {z.slug for z in ds.zones.all()}
            if zone_slug is not None and zone_slug not in zones:
                raise _invalid(f"datasets[{i}]", f"{ds.slug} has no copy in zone {zone_slug}.")
            holding = zones if holding is None else holding & zones
        if zone_slug is None:
            if not holding:
                raise _invalid("datasets", "No zone holds a copy of all these datasets.")
            if len(holding) == 1:
                zone_slug = next(iter(holding))
    return spec if zone_slug == spec.zone else replace(spec, zone=zone_slug)


def attach_at_create(*, instance, volumes: list[dict], datasets: list, actor=None, request=None) -> None:
    """Attach the create's volumes and mount its datasets (inside the create's transaction, instance locked)."""
    zone_id = instance.zone_id or _placed_zone_id(instance)
    storage_services.volumes_attach(org=instance.organization, instance_id=instance.pk, zone_id=zone_id,
                                    volumes=volumes, actor=actor, request=request)
    if datasets:
        storage_services.datasets_mount(org=instance.organization, instance_id=instance.pk, zone_id=zone_id,
                                        datasets=datasets, actor=actor, request=request)


def _placed_zone_id(instance):
    # A placement without a requested zone: the zone of the nodes it was given (one zone per instance).
    group = instance.groups.live().select_related("node").first()
    return group.node.zone_id if group is not None else None


def volume_attach(*, instance, volume_id, mount_path=None, actor=None, request=None):
    """Attach a volume to a locked, stopped (or waiting) instance; the instance takes the volume's zone if it had
    none, so its next start is placed there. 409 invalid_state in other states."""
    from core.errors import InvalidState

    if instance.state not in ATTACHABLE_STATES:
        raise InvalidState(gettext('Attach volumes to a stopped instance (this one is %(state)s).') % {'state': instance.state},
                           details={"state": [str(instance.state)]})
    volume = volume_get(org=instance.organization, volume_id=volume_id)
    if instance.zone_id is None:
        held = storage_selectors.volumes_for_instance(instance_id=instance.pk)
        if held and held[0].volume.zone_id != volume.zone_id:
            raise _invalid("volume", "The instance's other volumes are in another zone.")
    attachment = storage_services.volume_attach(org=instance.organization, volume_id=volume.pk,
                                                instance_id=instance.pk, zone_id=instance.zone_id, mount_path=mount_path,
                                                actor=actor, request=request)
    if instance.zone_id is None:
        instance.zone = Zone.objects.get(pk=volume.zone_id)
        instance.save(update_fields=["zone", "updated_at"])
    return attachment


def volume_detach(*, instance, volume_id, actor=None, request=None) -> None:
    """Detach a volume from a locked, stopped (or waiting) instance."""
    from core.errors import InvalidState

    if instance.state not in ATTACHABLE_STATES:
        raise InvalidState(gettext('Detach volumes from a stopped instance (this one is %(state)s).') % {'state': instance.state},
                           details={"state": [str(instance.state)]})
    storage_services.volume_detach(org=instance.organization, volume_id=volume_id, instance_id=instance.pk,
                                   actor=actor, request=request)


def storage_released(*, instance, actor=None) -> None:
    """On terminated: the instance's volumes are detached (kept, still billed) and its datasets unmounted."""
    storage_services.instance_storage_release(org=instance.organization, instance_id=instance.pk, actor=actor)


def volume_names_of(*, instance_id) -> list[str]:
    """The names of the volumes attached to the instance (what its stop keeps)."""
    return [a.volume.name for a in storage_selectors.volumes_for_instance(instance_id=instance_id)]


def storage_bodies(instance_ids) -> dict:
    """{instance id: {"volumes": [...], "datasets": [...]}} for a page of instances (two queries)."""
    vols = storage_selectors.volumes_for_instances(instance_ids)
    dsets = storage_selectors.datasets_for_instances(instance_ids)
    return {i: {"volumes": [attachment_body(a) for a in vols.get(i, [])],
                "datasets": [dataset_mount_body(m) for m in dsets.get(i, [])]} for i in instance_ids}


def storage_body_of_row(volumes, datasets) -> dict:
    """storage_bodies' entry for one instance from what storage.selectors.instance_storage_expressions read."""
    return {"volumes": [attachment_row_body(a) for a in volumes or ()],
            "datasets": [dataset_row_body(m) for m in datasets or ()]}


def quote_storage(*, org, volumes: list[dict], datasets: list) -> dict:
    """The volumes' hourly price for a quote (datasets are free): {"volumes": [...], "price_per_hour": µCNY}."""
    rows, total = [], 0
    for i, entry in enumerate(volumes):
        try:
            v = volume_get(org=org, volume_id=entry["volume"])
        except NotFoundError as exc:
            raise NotFoundError(gettext("Volume not found."), details={f"volumes[{i}].volume": [gettext("Volume not found.")]}) from exc
        rows.append({"volume": str(v.pk), "name": v.name, "size_gib": v.size_gib, "price_per_hour": v.size_gib * v.rate})
        total += v.size_gib * v.rate
    found = set(Dataset.objects.filter(active=True, slug__in=[str(d) for d in datasets]).values_list("slug", flat=True))
    return {"volumes": rows, "datasets": sorted(found), "price_per_hour": total}
