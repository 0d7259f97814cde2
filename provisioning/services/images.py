""""Save as image": a running container instance's container committed and pushed to the operator's registry
(IMAGE_SAVE_REGISTRY) under the organization's namespace, becoming one of its private images, billed as storage.

The API call writes the image row (state saving) and queues `provisioning.image_save`; the task asks the node's
driver to commit + push (the operator's login sealed in the agent command), reads the pushed image back from the
registry (digest, size) and opens its storage meter. A container instance only: a bare-metal node has no container
to commit (its disk is the customer's whole OS), and a stopped container instance has none left (a stop removes
it: provisioning/stop_keeps.py).
"""
import logging

from django.conf import settings
from django.db import transaction
from django.db.models import Prefetch
from django.utils.translation import gettext

from core.errors import InvalidState
from core.outbox import outbox_send
from inventory.custom_images import custom_image_save_finish, custom_image_save_start, push_auth
from inventory.models import CustomImage, Node
from storage.saved_images import saved_image_meter_open

from ..choices import InstanceKind
from ..choices import InstanceState as S
from ..drivers.base import container_name
from ..lock_objects import instance_lock
from ..models import NodeGroup
from .fleet import driver_for, node_ref

logger = logging.getLogger("cardmix.provisioning")


def instance_image_save(*, org, instance_id, name: str, tag: str = "latest", actor=None, request=None) -> CustomImage:
    """Start saving the instance's container as the organization's image `name:tag` (→ the image, state saving).
    404 for another organization's instance; 409 for bare metal, an instance not running, one of several parts,
    or a platform without IMAGE_SAVE_REGISTRY; 400 naming `name` / `tag`."""
    with transaction.atomic():
        instance = instance_lock(instance_id=instance_id, org=org)
        if not settings.IMAGE_SAVE_REGISTRY:
            raise InvalidState(gettext("Saving images is not set up on this platform (IMAGE_SAVE_REGISTRY is empty)."))
        if instance.kind != InstanceKind.CONTAINER:
            raise InvalidState(gettext("Save as image works on container instances only: a bare-metal instance has "
                                       "no container to commit (save what you need to a volume instead)."))
        if instance.state != S.RUNNING:
            raise InvalidState(gettext("The instance is %(state)s; save it as an image while it runs (a stop removes "
                                       "its container).") % {"state": instance.state})
        nodes = Node.objects.select_related("zone", "accelerator")
        groups = list(NodeGroup.objects.live().filter(instance_id=instance.pk)
                      .prefetch_related(Prefetch("node", queryset=nodes)).order_by("item_index", "id"))
        if len(groups) != 1:
            raise InvalidState(gettext("The instance runs as %(count)s containers; Save as image saves an instance "
                                       "of one container.") % {"count": len(groups)})
        group = groups[0]
        image = custom_image_save_start(org=org, name=name, tag=tag, vendors=[group.node.accelerator.vendor],
                                        zone_id=group.node.zone_id, source_instance_id=instance.pk, actor=actor,
                                        request=request)
        # Through the transactional outbox (core/outbox.py): sent once this commits, never lost to a broker outage.
        outbox_send("provisioning.image_save", args=[str(image.pk), group.pk])
    return image


def image_save_run(*, image_id, group_id) -> CustomImage | None:
    """The node commits and pushes; then the image is read back from the registry and billed (or failed, why)."""
    image = CustomImage.objects.filter(pk=image_id).first()
    group = (NodeGroup.objects.select_related("node__zone", "node__accelerator").filter(pk=group_id).first())
    if image is None or group is None:
        return image
    node = group.node
    try:
        out = driver_for(node).image_save(
            node_ref(node), container=container_name(str(group.instance_id), group.card_indices),
            reference=image.reference, registry_auth=push_auth(image.reference),
            timeout_s=settings.IMAGE_SAVE_TIMEOUT_SECONDS)
    except Exception as exc:  # the image must not stay "saving" for ever: failed, with why
        logger.exception("image save crashed", extra={"image": str(image_id)})
        return custom_image_save_finish(image_id=image_id, pushed=False, output=f"{type(exc).__name__}: {exc}")
    saved = custom_image_save_finish(image_id=image_id, pushed=out.ok, output=out.text)
    if saved is not None and saved.state == "ready":
        saved_image_meter_open(image=saved)
    logger.info("image save finished", extra={"image": str(image_id), "state": getattr(saved, "state", None),
                                              "exit_code": out.exit_code})
    return saved
