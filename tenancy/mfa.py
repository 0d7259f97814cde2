"""Multi-factor authentication (django-allauth's `mfa` app holds the authenticators): whether a user has a second
factor, and an organization's rule that every member needs one."""
from allauth.mfa.models import Authenticator
from django.db import transaction
from django.utils.translation import gettext as _

from core.errors import PermissionDeniedError

from .audit import audit_record
from .choices import Role
from .lock_objects import organization_lock
from .models import Membership, Organization

# A second factor: recovery codes alone are a fallback for one, not one.
SECOND_FACTORS = (Authenticator.Type.TOTP, Authenticator.Type.WEBAUTHN)


def user_has_mfa(*, user) -> bool:
    """Whether the user has enrolled TOTP or a passkey / security key."""
    return Authenticator.objects.filter(user=user, type__in=SECOND_FACTORS).exists()


def organization_mfa_required_set(*, actor_membership: Membership, required: bool, request=None) -> Organization:
    """An owner makes a second factor required (or optional again) for every member; audited when it changes."""
    if actor_membership.role != Role.OWNER:
        raise PermissionDeniedError(_("Only owners change the organization's sign-in rules."))
    with transaction.atomic():
        org = organization_lock(actor_membership.organization_id)
        if org.mfa_required == required:
            return org
        org.mfa_required = required
        org.save(update_fields=["mfa_required"])
        audit_record(action="organization.mfa_required_set", org=org, actor=actor_membership.user, target=org,
                     request=request, details={"mfa_required": required})
    return org
