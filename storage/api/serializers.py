"""Volume, dataset and storage price representations, and the write bodies (strict: unknown fields are 400)."""
from django.utils.translation import gettext_lazy
from rest_framework import serializers

from core.money import format_ucny
from core.serializers import StrictSerializer

from ..choices import VolumeKind

HOURS_PER_MONTH = 720  # the console's and the API's "monthly cost": 30 days of the current size and price


class VolumeCreateSerializer(StrictSerializer):
    """POST /volumes/."""

    name = serializers.RegexField(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", max_length=63,
                                  error_messages={"invalid": gettext_lazy("Lower-case letters, digits and hyphens (1–63).")})
    kind = serializers.ChoiceField(choices=VolumeKind.choices)
    size_gib = serializers.IntegerField(min_value=1)
    zone = serializers.SlugField(max_length=40)


class VolumeUpdateSerializer(StrictSerializer):
    """PATCH /volumes/<id>/: grow (the one thing that changes)."""

    size_gib = serializers.IntegerField(min_value=1)


class AttachmentInputSerializer(StrictSerializer):
    """One entry of `volumes: [...]` at instance create, or the body of POST /instances/<id>/volumes/."""

    volume = serializers.UUIDField()
    mount_path = serializers.CharField(max_length=200, required=False, allow_blank=False)


def volume_body(volume, *, costs: dict | None = None, deletion_at=None) -> dict:
    """The volume as the API shows it (live attachments from `volume.live_attachments` when prefetched)."""
    attachments = getattr(volume, "live_attachments", None)
    if attachments is None:
        attachments = list(volume.attachments.live())
    per_hour = volume.size_gib * volume.rate
    return {
        "id": str(volume.pk), "name": volume.name, "kind": volume.kind, "zone": volume.zone.slug,
        "size_gib": volume.size_gib, "state": volume.state, "usage_gib": f"{volume.usage_gib:.3f}",
        "usage_reported_at": volume.usage_reported_at, "over_quota": volume.over_quota,
        "price_per_gib_hour": format_ucny(volume.rate), "price_per_hour": format_ucny(per_hour),
        "monthly_cost": format_ucny(per_hour * HOURS_PER_MONTH),
        "cost_so_far": format_ucny(int((costs or {}).get(volume.pk, 0))),
        "attachments": [{"instance": str(a.instance_id), "mount_path": a.mount_path, "attached_at": a.attached_at}
                        for a in attachments],
        "unpaid_since": volume.unpaid_since, "deletion_at": deletion_at,
        "created_at": volume.created_at, "deleted_at": volume.deleted_at,
    }


def attachment_body(a) -> dict:
    """A volume mounted in an instance (the instance body's `volumes`)."""
    v = a.volume
    return {"volume": str(v.pk), "name": v.name, "kind": v.kind, "mount_path": a.mount_path,
            "size_gib": v.size_gib, "usage_gib": f"{v.usage_gib:.3f}", "over_quota": v.over_quota,
            "price_per_hour": format_ucny(v.size_gib * v.rate), "attached_at": a.attached_at}


def dataset_mount_body(m) -> dict:
    """A library entry mounted read-only (the instance body's `datasets`)."""
    d = m.dataset
    return {"dataset": d.slug, "name": d.name, "kind": d.kind, "mount_path": d.mount_path, "read_only": True,
            "size_gib": d.size_gib}


def attachment_row_body(a: dict) -> dict:
    """attachment_body from a row of selectors.instance_storage_expressions (the instance list's path)."""
    from decimal import Decimal

    from core.dbclock import db_time

    return {"volume": a["volume"], "name": a["name"], "kind": a["kind"], "mount_path": a["mount_path"],
            "size_gib": a["size_gib"], "usage_gib": f"{Decimal(a['usage_gib']):.3f}", "over_quota": a["over_quota"],
            "price_per_hour": format_ucny(a["size_gib"] * a["rate"]), "attached_at": db_time(a["attached_at"])}


def dataset_row_body(m: dict) -> dict:
    """dataset_mount_body from a row of selectors.instance_storage_expressions."""
    return {"dataset": m["dataset"], "name": m["name"], "kind": m["kind"], "mount_path": f"/datasets/{m['dataset']}",
            "read_only": True, "size_gib": m["size_gib"]}


def dataset_body(d) -> dict:
    return {"id": str(d.pk), "slug": d.slug, "name": d.name, "kind": d.kind, "size_gib": d.size_gib,
            "description": d.description, "licence": d.licence, "mount_path": d.mount_path,
            "zones": sorted(z.slug for z in d.zones.all()), "price_per_hour": "0.000000"}


def storage_price_body(zone_slug: str, kind: str, per_gib_hour: int) -> dict:
    return {"zone": zone_slug, "kind": kind, "price_per_gib_hour": format_ucny(per_gib_hour),
            "price_per_tib_month": format_ucny(per_gib_hour * 1024 * HOURS_PER_MONTH)}
