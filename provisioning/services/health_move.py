"""The one-click move of a running container off a failed card (SPEC §10): its groups holding a failed card
are placed on healthy cards in the same zone by the node-dark move (dark.groups_move: provisioning again, its
own SLA window, volumes kept attached); the old container's release is queued on its node at once, before the
new placement (which may land on the same node and first card: the same container name)."""
from django.db import transaction
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import InsufficientCapacity, InvalidState
from tenancy.audit import audit_record

from ..choices import InstanceKind
from ..choices import InstanceState as S
from ..lock_objects import instance_lock
from ..models import HealthIncident, Instance
from .dark import _live_groups, groups_move

HEALTH_MOVED = "re-placed: a card failed"


def instance_move_healthy(*, org, instance_id, actor, request=None) -> Instance:
    """running container with a failed card → provisioning on healthy cards; 409 when it is not one, or when no
    healthy cards are free in its zone now (nothing changes then)."""
    with transaction.atomic():
        instance = instance_lock(instance_id=instance_id, org=org)
        if instance.state != S.RUNNING or instance.kind != InstanceKind.CONTAINER:
            raise InvalidState(gettext("Only a running container instance can move to healthy cards."),
                               details={"state": [str(instance.state)], "kind": [instance.kind]})
        failed = set(HealthIncident.objects.filter(instance=instance, ended_at__isnull=True, failed_at__isnull=False)
                     .values_list("card_id", flat=True))
        if not failed:
            raise InvalidState(gettext("None of this instance's cards failed: there is nothing to move it from."))
        groups = _live_groups(instance.pk)
        moving = [g for g in groups if failed & set(g.card_ids)]
        if not groups_move(instance, groups, node_ids={g.node_id for g in moving}, now=db_now(), reason=HEALTH_MOVED,
                           release_old=True):
            raise InsufficientCapacity(gettext("No healthy cards are free in this instance's zone now; try again "
                                               "later, or stop it."))
        audit_record(action="instance.move_healthy", org=org, actor=actor, target=instance, request=request,
                     details={"cards": sorted(str(c) for c in failed)})
    return instance
