"""Reads of real-name verifications, always by organization (another organization's id → 404)."""
from django.shortcuts import get_object_or_404

from ..models_realname import RealNameVerification

_HEAVY = ("licence", "id_number_sealed")  # bytes a list or a status page never needs


def realname_list(*, org):
    """The organization's submissions, newest first."""
    return RealNameVerification.objects.filter(organization=org).defer(*_HEAVY).select_related("decided_by")


def realname_current(*, org) -> RealNameVerification | None:
    """The newest submission (the one that decides the status shown), or None."""
    return realname_list(org=org).first()


def realname_get(*, org, id, with_licence: bool = False) -> RealNameVerification:
    qs = RealNameVerification.objects.filter(organization=org)
    return get_object_or_404(qs if with_licence else qs.defer(*_HEAVY), pk=id)
