"""Invitations by email and organizations created by customers (Teams, SPEC §2).

An invitation is a signed, timestamped link (like the verification link, no row): it names the organization, the
address, the role, who invited and a nonce. Accepting it checks, under the organization's lock, that the inviter may
still invite to that role there, that this nonce was never used (the accept's audit row records it) and that the
address was not removed from the organization after the link was made; then it adds the membership — creating the
account first when the address has none. The link went to that address, so accepting it also verifies the email
(the trial follows the usual rule: once per address)."""
import secrets

from django.conf import settings
from django.core import signing
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext, gettext_lazy

from core.errors import PermissionDeniedError, ValidationFailed
from core.i18n import language_of
from core.mail import person, send_to_people

from .audit import audit_record
from .choices import Role
from .lock_objects import organization_lock
from .models import AuditEvent, Membership, Organization, User, normalize_email
from .permissions import role_can

SALT = "tenancy.invitation"
INVITATION_MAX_AGE_SECONDS = 7 * 24 * 3600
INVALID = gettext_lazy("This invitation link is invalid, was already used or has expired.")


def _check_inviter(membership: Membership | None, role: str) -> None:
    if membership is None or not role_can(membership.role, "members_manage"):
        raise PermissionDeniedError(gettext("Your role does not allow inviting members."))
    if role == Role.OWNER and membership.role != Role.OWNER:
        raise PermissionDeniedError(gettext("Only owners may invite owners."))


def invitation_token_make(*, org_id, email: str, role: str, inviter_id) -> str:
    return signing.dumps({"o": str(org_id), "e": email, "r": role, "i": str(inviter_id),
                          "n": secrets.token_hex(8), "t": timezone.now().isoformat()}, salt=SALT, compress=True)


def invitation_read(token: str) -> dict | None:
    """The invitation a link names ({org, email, role, inviter_id, nonce, made_at}), or None: forged, tampered with,
    expired, or naming an organization that no longer exists."""
    try:
        data = signing.loads(token, salt=SALT, max_age=INVITATION_MAX_AGE_SECONDS)
    except signing.BadSignature:  # includes SignatureExpired
        return None
    org = Organization.objects.filter(pk=data.get("o")).first()
    if org is None or data.get("r") not in Role.values:
        return None
    return {"org": org, "email": data["e"], "role": data["r"], "inviter_id": data["i"], "nonce": data["n"],
            "made_at": parse_datetime(data["t"])}


def invitation_url(token: str) -> str:
    return settings.SITE_URL.rstrip("/") + reverse("console:invitation_accept", args=[token])


def invitation_send(*, actor_membership: Membership, email: str, role: str, request=None) -> str:
    """Email a link that adds `email` to the actor's organization with `role` (owners and admins; only owners invite
    owners); returns the link. An address that is already a member is refused (400)."""
    if role not in Role.values:
        raise ValidationFailed(gettext("Unknown role."), details={"role": [gettext('Choose one of %(join)s.') % {'join': ', '.join(Role.values)}]})
    _check_inviter(actor_membership, role)
    email = normalize_email(email)
    org = actor_membership.organization
    if Membership.objects.filter(organization=org, user__email=email).exists():
        raise ValidationFailed(gettext("This user is already a member."), details={"email": [gettext("Already a member.")]})
    token = invitation_token_make(org_id=org.pk, email=email, role=role, inviter_id=actor_membership.user_id)
    url = invitation_url(token)
    inviter = actor_membership.user
    with transaction.atomic():
        audit_record(action="member.invitation_send", org=org, actor=inviter, target=org, request=request,
                     details={"email": email, "role": role})
        # An address with an account reads its own language; one without, the inviter's (else the request's).
        language = User.objects.filter(email=email).values_list("language", flat=True).first() or language_of(inviter)
        send_to_people([person(email, language)], lambda: (
            gettext('You are invited to %(name)s on Cardmix') % {'name': org.name},
            gettext('%(email)s invites you to join %(name)s on Cardmix as %(role)s.\n\nAccept the invitation (and '
                    'create your account if you have none):\n\n%(url)s\n\nThe link is valid for seven days and can '
                    'be used once. If you did not expect it, ignore it.\n') % {
                'email': inviter.name or inviter.email, 'name': org.name, 'role': Role(role).label, 'url': url}),
            fail_silently=False)
    return url


def invitation_accept(*, token: str, user=None, name: str = "", password: str | None = None,
                      request=None) -> Membership:
    """Join the organization a link names. `user`: the signed-in account, which must own the invited address; without
    one, an account is created for the address with `name` and `password` (an address that has an account must log
    in first). 400 validation_error for a bad, used or expired link, or bad account fields."""
    from . import services  # services re-exports this module's neighbours; imported here to avoid a cycle

    invitation = invitation_read(token)
    if invitation is None:
        raise ValidationFailed(str(INVALID), details={"token": [str(INVALID)]})
    email, org = invitation["email"], invitation["org"]
    if user is not None and user.email != email:
        raise ValidationFailed(gettext('This invitation is for %(email)s; log out and open the link again.') % {'email': email},
                               details={"token": [gettext("For another address.")]})
    try:
        with transaction.atomic():
            organization_lock(org.pk)
            inviter = Membership.objects.filter(organization=org, user_id=invitation["inviter_id"]).first()
            try:
                _check_inviter(inviter, invitation["role"])
            except PermissionDeniedError:
                raise ValidationFailed(str(INVALID), details={"token": [gettext("The inviter can no longer invite.")]}) from None
            used = AuditEvent.objects.filter(organization=org, action="member.invitation_accept",
                                             details__nonce=invitation["nonce"]).exists()
            removed = AuditEvent.objects.filter(organization=org, action="member.remove", details__email=email,
                                                created_at__gt=invitation["made_at"]).exists()
            if used or removed:
                raise ValidationFailed(str(INVALID), details={"token": [str(INVALID)]})
            if user is None and User.objects.filter(email=email).exists():
                raise ValidationFailed(gettext('An account uses %(email)s: log in to accept the invitation.') % {'email': email},
                                       details={"token": [gettext("Log in first.")]})
            if user is None:
                user = services.user_signup(email=email, password=password, name=name, request=request)
            if Membership.objects.filter(organization=org, user=user).exists():
                raise ValidationFailed(gettext("You are already a member."), details={"token": [gettext("Already a member.")]})
            membership = Membership.objects.create(organization=org, user=user, role=invitation["role"])
            audit_record(action="member.invitation_accept", org=org, actor=user, target=membership, request=request,
                         details={"email": email, "role": invitation["role"], "nonce": invitation["nonce"],
                                  "invited_by": invitation["inviter_id"]})
            services.user_mark_verified(user=user, request=request)  # the link reached this address
    except IntegrityError:  # a concurrent accept of the same link, or a sign-up with the address, won
        raise ValidationFailed(str(INVALID), details={"token": [str(INVALID)]}) from None
    return membership


def organization_create_for_user(*, user, name: str, request=None) -> Organization:
    """A customer creates an organization from the console and becomes its owner (not personal, default quota)."""
    name = (name or "").strip()
    if not name:
        raise ValidationFailed(gettext("Name the organization."), details={"name": [gettext("This field is required.")]})
    if len(name) > 150:
        raise ValidationFailed(gettext("The name is too long."), details={"name": [gettext('At most 150 characters (%(len)s).') % {'len': len(name)}]})
    from .services import _unique_slug

    with transaction.atomic():
        org = Organization.objects.create(name=name, slug=_unique_slug(name), is_personal=False)
        membership = Membership.objects.create(organization=org, user=user, role=Role.OWNER)
        audit_record(action="organization.create", org=org, actor=user, target=org, request=request,
                     details={"name": org.name, "slug": org.slug, "owner": user.email, "by": "console"})
        audit_record(action="member.invite", org=org, actor=user, target=membership, request=request,
                     details={"email": user.email, "role": Role.OWNER})
    return org
