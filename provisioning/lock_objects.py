"""select_for_update helpers, always in pk order so concurrent writers never deadlock."""
from django.utils.translation import gettext

from core.errors import NotFoundError

from .models import Instance


def instance_lock(*, instance_id, org=None) -> Instance:
    """Lock one instance row (optionally scoped to an organization: 404 for other tenants)."""
    qs = Instance.objects.select_for_update(of=("self",)).select_related("organization")
    if org is not None:
        qs = qs.filter(organization=org)
    instance = qs.filter(pk=instance_id).first()
    if instance is None:
        raise NotFoundError(gettext("No such instance."))
    return instance
