"""Account deletion (PIPL art. 47, GDPR art. 17): a person's email, name, keys, tokens and memberships go; the
ledger, the audit log and every other row that must stay keeps pointing at the same user row, which is anonymised.
Asked for with the password, confirmed through a link emailed to the address (24 hours), refused while one of the
user's organizations would be left with running instances, volumes or a negative balance, or without an owner."""
import logging
import re

from django.apps import apps
from django.core import signing
from django.db import models, transaction
from django.db.models.functions import Cast
from django.utils.translation import gettext

from billing.funds import available_from, balances_of
from core.errors import InvalidState, PermissionDeniedError, ValidationFailed
from core.mail import person, send_to_people
from provisioning.choices import InstanceState
from provisioning.models import Instance
from storage.choices import VolumeState
from storage.models import Volume
from tenancy.audit import audit_record
from tenancy.choices import Role
from tenancy.mailbox import mailbox_erased, mailbox_key
from tenancy.models import ApiToken, Membership, SshKey, TrialClaim, User

logger = logging.getLogger("cardmix.privacy")
SALT = "privacy.account-deletion"
MAX_AGE_SECONDS = 24 * 3600
ERASED = "[deleted]"
NAME_MIN_LENGTH = 4  # a shorter name ("Li") is a substring of too much else to be erased everywhere
ENDED = (InstanceState.TERMINATED, InstanceState.FAILED)
# Rows that are the person's own, deleted outright (the rest are kept and scrubbed of the address and name):
# login attempts by the address; allauth's addresses, second factors and SSO links by the user.
OWN_ROWS = ("axes.AccessAttempt", "axes.AccessLog", "axes.AccessFailureLog")
OWN_ROWS_OF_USER = ("account.EmailAddress", "mfa.Authenticator", "socialaccount.SocialAccount")


def deletion_blockers(user) -> list[str]:
    """Why the account cannot be deleted now (empty when it can), in words the person can act on."""
    reasons = []
    for m in Membership.objects.filter(user=user).select_related("organization"):
        org = m.organization
        others = Membership.objects.filter(organization=org).exclude(user=user)
        if m.role != Role.OWNER or others.filter(role=Role.OWNER).exists():
            continue  # the organization keeps an owner: leaving it is enough
        if others.exists():
            reasons.append(gettext("You are the only owner of %(org)s: make another member its owner first.")
                           % {"org": org.name})
            continue
        live = Instance.objects.filter(organization=org).exclude(state__in=ENDED).count()
        if live:
            reasons.append(gettext("%(org)s has %(count)s instance(s) not terminated: terminate them first.")
                           % {"org": org.name, "count": live})
        volumes = Volume.objects.filter(organization=org).exclude(state=VolumeState.DELETED).count()
        if volumes:
            reasons.append(gettext("%(org)s has %(count)s volume(s): delete them first.")
                           % {"org": org.name, "count": volumes})
        balances = balances_of(org)
        if available_from(balances) - balances["credit_limit"] < 0:  # what it holds, not what it may borrow
            reasons.append(gettext("%(org)s's balance is negative: top up to settle it first.") % {"org": org.name})
    return reasons


def _refuse_if_blocked(user) -> None:
    reasons = deletion_blockers(user)
    if reasons:
        raise InvalidState(gettext("The account cannot be deleted yet: %(reasons)s") % {"reasons": " ".join(reasons)},
                           details={"blockers": reasons})


def deletion_token_make(user) -> str:
    return signing.dumps({"u": str(user.pk), "e": user.email}, salt=SALT, compress=True)


def account_deletion_request(*, user, password: str, site_url: str, request=None) -> None:
    """Check the password and the blockers, then email the confirmation link (nothing is deleted yet)."""
    if not user.check_password(password or ""):
        raise PermissionDeniedError(gettext("The password is not right."),
                                    details={"password": [gettext("Not your password.")]})
    _refuse_if_blocked(user)
    link = f"{site_url.rstrip('/')}/account/delete/{deletion_token_make(user)}/"
    with transaction.atomic():
        audit_record(action="user.delete_requested", actor=user, target=user, request=request)
        email = user.email
        send_to_people([user], lambda: (gettext("Confirm deleting your Cardmix account"), gettext(
            "Someone (we hope you) asked to delete the Cardmix account %(email)s.\n\nTo delete it for good, open "
            "this link within 24 hours and confirm:\n\n%(link)s\n\nYour name, email address, SSH keys and API "
            "tokens are erased; the ledger and audit log of your organizations are kept without them. If you did "
            "not ask, ignore this email and change your password.") % {"email": email, "link": link}))


def deletion_token_user(token: str) -> User:
    """The user a confirmation link names, while its address is unchanged and it is younger than 24 hours."""
    try:
        data = signing.loads(token, salt=SALT, max_age=MAX_AGE_SECONDS)
    except signing.BadSignature:
        data = None
    user = User.objects.filter(pk=data["u"], is_active=True).first() if data else None
    if user is None or user.email != data.get("e"):
        raise ValidationFailed(gettext("This link is invalid or has expired."),
                               details={"token": [gettext("Invalid or expired.")]})
    return user


def _scrub_value(value, pattern: re.Pattern):
    if isinstance(value, str):
        return pattern.sub(ERASED, value)
    if isinstance(value, list):
        return [_scrub_value(v, pattern) for v in value]
    if isinstance(value, dict):
        return {_scrub_value(k, pattern): _scrub_value(v, pattern) for k, v in value.items()}
    return value


def _scrub_everywhere(needles: list[str], *, skip: set[str]) -> int:
    """Replace every occurrence of the needles in every text and JSON column of every model (but `skip`'s);
    returns how many rows changed. Slow on purpose-less tables is fine: deletion is rare and runs once."""
    pattern = re.compile("|".join(re.escape(n) for n in needles), re.IGNORECASE)
    changed = 0
    for model in apps.get_models():
        if model._meta.label in skip or model._meta.proxy or not model._meta.managed:
            continue
        for field in model._meta.concrete_fields:
            if not isinstance(field, models.CharField | models.TextField | models.JSONField) or field.primary_key:
                continue
            text = Cast(field.name, models.TextField()) if isinstance(field, models.JSONField) else models.F(field.name)
            rows = model._default_manager.annotate(_text=text)
            query = models.Q()
            for needle in needles:
                query |= models.Q(_text__icontains=needle)
            for pk, value in rows.filter(query).values_list("pk", field.name):
                model._default_manager.filter(pk=pk).update(**{field.name: _scrub_value(value, pattern)})
                changed += 1
    return changed


def account_delete(*, user, request=None) -> User:
    """Delete the person: close the organizations only they were in, leave the others, erase what identifies them
    and keep the user row (anonymised) under the ledger and audit rows that point at it."""
    email, name = user.email, (user.name or "").strip()
    goodbye = person(email, user.language)  # the last email, in their language, to the address about to be erased
    with transaction.atomic():
        user = User.objects.select_for_update().get(pk=user.pk)
        _refuse_if_blocked(user)
        for m in Membership.objects.filter(user=user).select_related("organization"):
            org = m.organization
            if not Membership.objects.filter(organization=org).exclude(user=user).exists():
                org.name, org.slug = f"Deleted organization {org.pk.hex[:8]}", f"deleted-{org.pk.hex}"
                org.save(update_fields=["name", "slug"])
                audit_record(action="organization.close", org=org, actor=user, target=org, request=request)
            else:
                audit_record(action="member.remove", org=org, actor=user, target=m, request=request,
                             details={"by": "account deletion"})
        Membership.objects.filter(user=user).delete()
        ApiToken.objects.filter(user=user).delete()
        SshKey.objects.filter(user=user).delete()
        key = mailbox_key(email)
        TrialClaim.objects.filter(mailbox=key).update(email=mailbox_erased(key), mailbox=mailbox_erased(key))
        for label in OWN_ROWS:
            if apps.is_installed(label.split(".")[0]):
                apps.get_model(label).objects.filter(username__iexact=email).delete()
        for label in OWN_ROWS_OF_USER:
            app_label, model_name = label.split(".")
            if any(c.label == app_label for c in apps.get_app_configs()):
                apps.get_model(app_label, model_name).objects.filter(user=user).delete()
        user.email = f"deleted-{user.pk.hex}@deleted.invalid"
        user.name = ""
        user.set_unusable_password()
        user.is_active = user.is_staff = user.is_superuser = False
        user.email_verified_at = None
        user.save()
        needles = [email] + ([name] if len(name) >= NAME_MIN_LENGTH else [])
        changed = _scrub_everywhere(needles, skip={"tenancy.User", "tenancy.TrialClaim"})
        audit_record(action="user.delete", actor=user, target=user, request=request, details={"rows_scrubbed": changed})
        send_to_people([goodbye], lambda: (
            gettext("Your Cardmix account was deleted"),
            gettext("Your Cardmix account and the personal data in it were deleted, as you asked. This is the last "
                    "email we send to this address.")))
    logger.info("account deleted", extra={"user": str(user.pk), "rows_scrubbed": changed})
    return user
