"""Saved images billed as storage: a container saved as an image ("Save as image", provisioning) is kept in the
operator's registry, so it is billed like a data disk of its size in the zone it was saved in — one open meter
(subject "image", instance_id = the image's id, cards = its size in whole GiB rounded up, rate = the zone's
current `disk` price per GiB-hour), posted by the ordinary meter tick, closed when the image is deleted."""
import logging

from billing import services as billing_services
from billing.choices import MeterSubject

from .choices import VolumeKind
from .selectors import StoragePriceMissing, storage_price_current

logger = logging.getLogger("cardmix.storage")
GIB = 1024 ** 3
METER_LABEL = "image:saved"


def saved_image_gib(size_bytes: int | None) -> int:
    """Whole GiB billed for an image of `size_bytes` (at least 1: a stored image is never free)."""
    return max(1, -(-int(size_bytes or 0) // GIB))


def saved_image_meter_open(*, image) -> bool:
    """Open the saved image's meter at its zone's disk price; False (logged) when the zone has no disk price."""
    try:
        price = storage_price_current(zone=image.zone, kind=VolumeKind.DISK)
    except StoragePriceMissing:
        logger.warning("saved image not billed: no disk storage price", extra={"image": str(image.pk)})
        return False
    billing_services.meter_open(org=image.organization_id, instance_id=image.pk, item_index=0,
                                accelerator=METER_LABEL, cards=saved_image_gib(image.size_bytes),
                                rate=price.per_gib_hour, subject=MeterSubject.IMAGE)
    return True


def saved_image_meter_close(*, image_id) -> None:
    """The image was deleted (inventory's custom_image_deleted hook, in its transaction): its meter closes now."""
    billing_services.meters_close(instance_id=image_id)
