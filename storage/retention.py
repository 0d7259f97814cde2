"""Volumes of organizations that cannot pay: kept and still metered (credit limit, then write-offs), the owners
warned by email and banner 7 days and 1 day before deletion, deleted after VOLUME_RETENTION_DAYS unpaid, audited.

"Unpaid" = the organization's available funds (credits + cash + credit limit) are at or below zero: its volume
meters are being written off. Funds recovering clears the episode. A warning always precedes deletion by its full
lead time (a sweep that ran late postpones the deletion instead of warning and deleting at once).
"""
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext

from billing.watch import funds_snapshot
from core.dbclock import db_now
from core.mail import send_to_people
from tenancy.audit import audit_record
from tenancy.choices import Role
from tenancy.selectors import members_to_tell
from webhooks.services import event_publish

from .choices import VolumeState
from .lock_objects import volume_lock
from .models import Volume, VolumeAttachment
from .services import _delete_locked

WARNINGS = (("warned_7d_at", timedelta(days=7)), ("warned_1d_at", timedelta(days=1)))


def deletion_due(volume: Volume):
    """When an unpaid volume is deleted (None while paid): the retention's end, postponed so that each warning
    keeps its full lead time (7 days, 1 day) when a sweep sent it late."""
    if volume.unpaid_since is None:
        return None
    due = volume.unpaid_since + timedelta(days=settings.VOLUME_RETENTION_DAYS)
    for flag, lead in WARNINGS:
        sent = getattr(volume, flag)
        if sent is not None:
            due = max(due, sent + lead)
    return due


def volumes_retention_sweep(*, now=None) -> dict:
    """Start, clear, warn and delete; returns counts. Run by beat every few minutes (task storage.volumes_retention)."""
    now = now or db_now()
    stats = {"unpaid": 0, "recovered": 0, "warned": 0, "deleted": 0}
    live = Volume.objects.exclude(state=VolumeState.DELETED)
    org_ids = set(live.values_list("organization_id", flat=True).distinct())
    if not org_ids:
        return stats
    unpaid = {o for o, (available, _) in funds_snapshot(org_ids).items() if available <= 0}
    stats["recovered"] = (live.filter(unpaid_since__isnull=False).exclude(organization_id__in=unpaid)
                          .update(unpaid_since=None, warned_7d_at=None, warned_1d_at=None))
    stats["unpaid"] = live.filter(organization_id__in=unpaid, unpaid_since__isnull=True).update(unpaid_since=now)
    for volume_id in live.filter(unpaid_since__isnull=False).order_by("pk").values_list("pk", flat=True):
        with transaction.atomic():
            volume = volume_lock(volume_id=volume_id)
            if volume.unpaid_since is None:
                continue
            for flag, lead in WARNINGS:
                # In order: the 1-day warning only after the 7-day one (deletion_due then moves with it).
                if getattr(volume, flag) is None:
                    if now >= deletion_due(volume) - lead:
                        _warn(volume, flag=flag, lead=lead, now=now)
                        stats["warned"] += 1
                    break
            else:
                if now >= deletion_due(volume):
                    _delete_unpaid(volume, now=now)
                    stats["deleted"] += 1
    return stats


def _warn(volume: Volume, *, flag: str, lead: timedelta, now) -> None:
    setattr(volume, flag, now)
    volume.save(update_fields=[flag, "updated_at"])
    due = deletion_due(volume)
    audit_record(action="volume.retention_warning", org=volume.organization, target=volume,
                 details={"lead_days": lead.days, "deletion_at": due.isoformat()})
    event_publish(org_id=volume.organization_id, type="volume.deletion_scheduled", dedupe_key=f"{volume.pk}:{flag}",
                  data={"volume": {"id": str(volume.pk), "name": volume.name, "size_gib": volume.size_gib,
                                   "zone": volume.zone.slug}, "deletion_at": due.isoformat(), "lead_days": lead.days})
    _email(volume, due=due)


def _email(volume: Volume, *, due) -> None:
    people = members_to_tell(org_id=volume.organization_id, roles=[Role.OWNER, Role.ADMIN])
    when = f"{due:%Y-%m-%d %H:%M} UTC"

    def render():
        return (gettext("Cardmix: volume %(volume)s will be deleted on %(when)s") % {"volume": volume.name,
                                                                                     "when": when},
                gettext("Your organization's funds have run out. Its volume %(volume)s (%(size)s GiB, zone %(zone)s) "
                        "is kept and still billed, but it will be deleted with all its data on %(when)s unless you "
                        "top up: %(url)s") % {"volume": volume.name, "size": volume.size_gib,
                                              "zone": volume.zone.slug, "when": when,
                                              "url": f"{settings.SITE_URL}/billing/"})

    send_to_people(people, render)


def _delete_unpaid(volume: Volume, *, now) -> None:
    # Its instances were stopped when the funds ran out; the attachments end with the volume.
    VolumeAttachment.objects.live().filter(volume=volume).update(detached_at=now)
    _delete_locked(volume, actor=None, request=None, reason=f"unpaid for {settings.VOLUME_RETENTION_DAYS} days")


def retention_warnings(*, org) -> list[dict]:
    """The console banner: the organization's volumes warned of deletion, with when (soonest first)."""
    rows = [{"volume": v, "deletion_at": deletion_due(v)} for v in
            Volume.objects.filter(organization=org, unpaid_since__isnull=False, warned_7d_at__isnull=False)
            .exclude(state=VolumeState.DELETED).select_related("zone")]
    return sorted(rows, key=lambda r: r["deletion_at"])
