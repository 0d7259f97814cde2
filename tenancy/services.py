"""Writes for tenancy: signup and verification, organizations, members (tokens and SSH keys: credentials.py)."""
import secrets

from django.conf import settings
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.utils import timezone, translation
from django.utils.text import slugify
from django.utils.translation import gettext

from core.errors import InvalidState, PermissionDeniedError, ValidationFailed
from core.i18n import supported_language

from . import hooks
from .audit import audit_record
from .choices import Role
from .credentials import ssh_key_add, ssh_key_delete, token_create, token_revoke  # noqa: F401 (re-exported)
from .lock_objects import organization_lock
from .mailbox import mailbox_erased, mailbox_key
from .middleware import SESSION_ORG_KEY
from .models import ApiToken, Membership, Organization, TrialClaim, User, normalize_email
from .permissions import role_can
from .selectors import membership_get_for_user


def email_domain_refused(email: str) -> bool:
    """Whether the address's domain (or a parent domain) is in settings.REFUSED_EMAIL_DOMAINS."""
    domain = email.rsplit("@", 1)[-1]
    for refused in settings.REFUSED_EMAIL_DOMAINS:
        refused = refused.strip().lower().lstrip("@")
        if refused and (domain == refused or domain.endswith("." + refused)):
            return True
    return False


def _clean_signup(*, email: str, password: str | None, name: str) -> str:
    email = normalize_email(email)
    errors: dict[str, list[str]] = {}
    try:
        validate_email(email)
    except ValidationError:
        errors["email"] = ["Enter a valid email address."]
    else:
        if email_domain_refused(email):
            errors["email"] = ["Sign-ups from this email domain are not accepted."]
        elif User.objects.filter(email=email).exists():
            errors["email"] = ["An account with this email address already exists."]
    if password is not None:
        try:
            validate_password(password, User(email=email, name=name))
        except ValidationError as exc:
            errors["password"] = list(exc.messages)
    if errors:
        raise ValidationFailed(gettext("The sign-up form has errors."), details=errors)
    return email


def _unique_slug(base: str) -> str:
    base = (slugify(base) or "org")[:60]
    while True:
        slug = f"{base}-{secrets.token_hex(3)}"
        if not Organization.objects.filter(slug=slug).exists():
            return slug


def user_signup(*, email: str, password: str | None, name: str = "", request=None) -> User:
    """Create a user (unverified) with a personal organization it owns. The verification link is allauth's (the
    sign-up page sends it); user_mark_verified grants the trial once the address is confirmed."""
    email = _clean_signup(email=email, password=password, name=name)
    name = (name or "").strip()[:150]
    try:
        with transaction.atomic():
            # i18n: the language the sign-up page spoke, so emails sent later from tasks speak it too.
            user = User.objects.create_user(email, password, name=name,
                                            language=supported_language(translation.get_language()))
            # i18n: the personal organization is named in the sign-up page's language ("Ada 的实验室").
            org_name = gettext("%(name)s's lab") % {"name": name or email.split("@")[0]}
            org = Organization.objects.create(name=org_name[:150],
                                              slug=_unique_slug(email.split("@")[0]), is_personal=True)
            Membership.objects.create(organization=org, user=user, role=Role.OWNER)
            audit_record(action="user.signup", org=org, actor=user, target=user, request=request,
                         details={"email": email})
    except IntegrityError:  # a concurrent sign-up with the same address won the unique index
        raise ValidationFailed(gettext("The sign-up form has errors."),
                               details={"email": [gettext("An account with this email address already exists.")]}) from None
    return user


def user_language_set(*, user: User, language: str) -> User:
    """i18n: the user's console and email language (a code of settings.LANGUAGES; "" = follow the browser)."""
    code = supported_language(language) if language else ""
    if language and not code:
        raise ValidationFailed(gettext("Unknown language."), details={"language": [gettext("Choose one of the listed languages.")]})
    if user.language != code:
        user.language = code
        user.save(update_fields=["language"])
    return user


def _trial_org(user) -> Organization | None:
    membership = (Membership.objects.select_related("organization")
                  .filter(user=user, role=Role.OWNER).order_by("-organization__is_personal", "created_at").first())
    return membership.organization if membership else None


def user_mark_verified(*, user: User, request=None) -> bool:
    """Mark the email verified and, the first time this address is ever verified, grant the trial.

    Returns False when the user was already verified (nothing happens twice).
    """
    with transaction.atomic():
        user = User.objects.select_for_update().get(pk=user.pk)
        if user.email_verified_at is not None:
            return False
        user.email_verified_at = timezone.now()
        user.save(update_fields=["email_verified_at"])
        org = _trial_org(user)
        audit_record(action="user.verify_email", org=org, actor=user, target=user, request=request,
                     details={"email": user.email})
        if org is not None:
            # The claim row outlives the account: deleting and re-creating it never earns a second trial, nor
            # does another spelling of the same mailbox (ada+1@gmail.com after ada@gmail.com).
            key = mailbox_key(user.email)
            first = False
            if not TrialClaim.objects.filter(mailbox=mailbox_erased(key)).exists():  # a deleted account's claim
                _, first = TrialClaim.objects.get_or_create(
                    mailbox=key, defaults={"email": user.email, "user": user, "organization": org})
            if first:
                hooks.trial_grant(org=org, user=user)
                audit_record(action="trial.claim", org=org, actor=user, target=org, request=request)
    return True


def user_create_verified(*, email: str, password: str | None = None, name: str = "", request=None) -> User:
    """Sign up and verify at once (`issue_token --create-user`, the demo seed): trial hook included."""
    user = user_signup(email=email, password=password, name=name, request=request)
    user_mark_verified(user=user, request=request)
    return user


def password_reset_complete(*, user: User, password: str, request=None) -> User:
    """Save the new password of a reset link's user and audit it (the signed-in user is nobody yet)."""
    with transaction.atomic():
        user.set_password(password)
        user.save(update_fields=["password"])
        audit_record(action="user.password_reset", org=_trial_org(user), actor=user, target=user, request=request)
    return user


def organization_switch(*, request, org_id) -> Membership:
    """Make another of the user's organizations current for the console session (404 if not a member)."""
    membership = membership_get_for_user(user=request.user, org_id=org_id)
    request.session[SESSION_ORG_KEY] = str(membership.organization_id)
    request.org, request.membership = membership.organization, membership
    audit_record(action="organization.switch", org=membership.organization, actor=request.user,
                 target=membership.organization, request=request)
    return membership


def organization_quota_set(*, org: Organization, card_quota: int, actor=None, request=None) -> Organization:
    """Operators change an organization's card quota (staff only; audited)."""
    if card_quota < 0:
        raise ValidationFailed(gettext("The quota cannot be negative."), details={"card_quota": [gettext("Must be ≥ 0.")]})
    with transaction.atomic():
        org = organization_lock(org.pk)
        old = org.card_quota
        if old == card_quota:
            return org  # nothing changed, nothing to audit (a form re-posting the same quota)
        org.card_quota = card_quota
        org.save(update_fields=["card_quota"])
        audit_record(action="organization.quota_set", org=org, actor=actor, target=org, request=request,
                     details={"old": old, "new": card_quota})
    return org


# --- Members -----------------------------------------------------------------------------------

def organization_create(*, operator, name: str, slug: str, owner_email: str, is_personal: bool = False,
                        card_quota: int | None = None, request=None) -> Organization:
    """An operator creates an organization with its first owner (an existing, active account), never ownerless:
    organization.create and the owner's member.invite are audited with the operator as actor, in one transaction."""
    _check_actor(None, operator)
    email = normalize_email(owner_email)
    if not User.objects.filter(email=email, is_active=True).exists():
        raise ValidationFailed(gettext("No Cardmix account uses this email address; ask them to sign up first."),
                               details={"owner_email": [gettext("No account with this email address.")]})
    fields = {"name": name, "slug": slug, "is_personal": is_personal}
    if card_quota is not None:
        fields["card_quota"] = card_quota
    try:
        with transaction.atomic():
            org = Organization.objects.create(**fields)
            audit_record(action="organization.create", org=org, actor=operator, target=org, request=request,
                         details={"name": org.name, "slug": org.slug, "card_quota": org.card_quota, "owner": email})
            member_invite(operator=operator, org=org, email=email, role=Role.OWNER, request=request,
                          reason="first owner of an organization created in the admin")
    except IntegrityError:  # a concurrent create with the same slug won the unique index
        raise ValidationFailed(gettext("The organization is invalid."),
                               details={"slug": [gettext("An organization with this slug exists.")]}) from None
    return org


def _check_role(role: str) -> None:
    if role not in Role.values:
        raise ValidationFailed(gettext("Unknown role."), details={"role": [gettext('Choose one of %(join)s.') % {'join': ', '.join(Role.values)}]})


def _check_manager(actor_membership: Membership, *, target_role: str | None = None, new_role: str | None = None):
    if not role_can(actor_membership.role, "members_manage"):
        raise PermissionDeniedError(gettext("Your role does not allow managing members."))
    if actor_membership.role != Role.OWNER and Role.OWNER in (target_role, new_role):
        raise PermissionDeniedError(gettext("Only owners may manage owners."))


def _check_actor(actor_membership: Membership | None, operator, **roles) -> None:
    """A member managing their own organization (the role matrix), or an operator (staff) in the admin."""
    if operator is not None:
        if not (operator.is_active and operator.is_staff):
            raise PermissionDeniedError(gettext("Only operators manage members from the admin."))
        return
    _check_manager(actor_membership, **roles)


def _actor_details(actor_membership: Membership | None, operator, reason: str, details: dict):
    """(actor, audit details): an operator's change names them and carries the reason they gave."""
    if operator is not None:
        return operator, {**details, "operator": True, "reason": reason}
    return actor_membership.user, details


def _lock_org(org_id) -> Organization:
    # Serialises member changes in one organization, so two owners cannot demote each other at once.
    return organization_lock(org_id)


def _owner_count(org_id) -> int:
    return Membership.objects.filter(organization_id=org_id, role=Role.OWNER).count()


def member_invite(*, actor_membership: Membership | None = None, email: str, role: str, request=None,
                  operator=None, org: Organization | None = None, reason: str = "") -> Membership:
    """Add an existing user to the actor's organization with a role (an operator names the organization)."""
    _check_role(role)
    _check_actor(actor_membership, operator, new_role=role)
    org = org if operator is not None else actor_membership.organization
    user = User.objects.filter(email=normalize_email(email), is_active=True).first()
    if user is None:
        raise ValidationFailed(gettext("No Cardmix account uses this email address; ask them to sign up first."),
                               details={"email": [gettext("No account with this email address.")]})
    with transaction.atomic():
        _lock_org(org.pk)
        if Membership.objects.filter(organization=org, user=user).exists():
            raise ValidationFailed(gettext("This user is already a member."), details={"email": [gettext("Already a member.")]})
        membership = Membership.objects.create(organization=org, user=user, role=role)
        actor, details = _actor_details(actor_membership, operator, reason, {"email": user.email, "role": role})
        audit_record(action="member.invite", org=org, actor=actor, target=membership, request=request,
                     details=details)
    return membership


def member_role_change(*, actor_membership: Membership | None = None, membership: Membership, role: str,
                       request=None, operator=None, reason: str = "") -> Membership:
    """Change a member's role; the last owner cannot be demoted (409), admins cannot touch owners (403)."""
    _check_role(role)
    _check_actor(actor_membership, operator, target_role=membership.role, new_role=role)
    with transaction.atomic():
        _lock_org(membership.organization_id)
        membership = Membership.objects.select_related("user", "organization").get(pk=membership.pk)
        _check_actor(actor_membership, operator, target_role=membership.role, new_role=role)
        old = membership.role
        if old == Role.OWNER and role != Role.OWNER and _owner_count(membership.organization_id) <= 1:
            raise InvalidState(gettext("The organization's last owner cannot be demoted."))
        membership.role = role
        membership.save(update_fields=["role"])
        actor, details = _actor_details(actor_membership, operator, reason,
                                        {"email": membership.user.email, "old": old, "new": role})
        audit_record(action="member.role_change", org=membership.organization, actor=actor, target=membership,
                     request=request, details=details)
    return membership


def member_remove(*, actor_membership: Membership | None = None, membership: Membership, request=None,
                  operator=None, reason: str = "") -> None:
    """Remove a member; their API tokens in this organization are revoked (and fail anyway without membership)."""
    _check_actor(actor_membership, operator, target_role=membership.role)
    with transaction.atomic():
        _lock_org(membership.organization_id)
        membership = Membership.objects.select_related("user", "organization").filter(pk=membership.pk).first()
        if membership is None:
            return
        _check_actor(actor_membership, operator, target_role=membership.role)
        if membership.role == Role.OWNER and _owner_count(membership.organization_id) <= 1:
            raise InvalidState(gettext("The organization's last owner cannot be removed."))
        ApiToken.objects.filter(organization_id=membership.organization_id, user_id=membership.user_id,
                                revoked_at__isnull=True).update(revoked_at=timezone.now())
        actor, details = _actor_details(actor_membership, operator, reason,
                                        {"email": membership.user.email, "role": membership.role})
        audit_record(action="member.remove", org=membership.organization, actor=actor, target=membership,
                     request=request, details=details)
        membership.delete()
