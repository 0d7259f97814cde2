"""Reads for tenancy; every organization-owned object is fetched with its organization."""
from .models import Membership


def membership_for_session(*, user, org_id=None):
    """The membership the console acts under: the chosen organization, else the oldest one."""
    qs = Membership.objects.select_related("organization").filter(user=user)
    if org_id:
        chosen = qs.filter(organization_id=org_id).first()
        if chosen is not None:
            return chosen
    return qs.order_by("created_at").first()
