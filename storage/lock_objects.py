"""Row locks of volumes, always in pk order so concurrent writers never deadlock."""
from django.utils.translation import gettext

from core.errors import NotFoundError

from .choices import VolumeState
from .models import Volume


def volume_lock(*, volume_id, org=None) -> Volume:
    """The volume's row, locked (FOR UPDATE); 404 when it is gone, deleted or another organization's."""
    qs = Volume.objects.select_for_update().exclude(state=VolumeState.DELETED)
    if org is not None:
        qs = qs.filter(organization=org)
    volume = qs.filter(pk=volume_id).first()
    if volume is None:
        raise NotFoundError(gettext("Volume not found."))
    return volume


def volumes_lock(volume_ids, *, org=None) -> dict:
    """{pk: volume} locked in pk order (an instance create attaching several)."""
    qs = Volume.objects.select_for_update().exclude(state=VolumeState.DELETED).filter(pk__in=list(volume_ids))
    if org is not None:
        qs = qs.filter(organization=org)
    return {v.pk: v for v in qs.order_by("pk")}
