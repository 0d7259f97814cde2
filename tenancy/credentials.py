"""Writes for a user's credentials: API tokens and SSH public keys."""
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext

from core.errors import PermissionDeniedError, ValidationFailed

from .audit import audit_record
from .models import ApiToken, Membership, SshKey, TokenScope
from .permissions import role_can
from .ssh_keys import ssh_key_parse
from .token_secrets import token_display_prefix, token_generate, token_hash

LAST_USED_RESOLUTION = timedelta(minutes=1)  # last_used_at is written at most once a minute per token


def _clean_name(name: str, field: str = "name") -> str:
    name = (name or "").strip()
    if not name:
        raise ValidationFailed(gettext("A name is required."), details={field: [gettext("This field is required.")]})
    if len(name) > 100:
        raise ValidationFailed(gettext("The name is too long."), details={field: [gettext("At most 100 characters.")]})
    return name


def token_create(*, membership: Membership, name: str, scope: str = TokenScope.WRITE, expires_at=None,
                 request=None) -> tuple[ApiToken, str]:
    """Create an API token for the membership's user in its organization → (token, secret shown once)."""
    if not role_can(membership.role, "tokens"):
        raise PermissionDeniedError(gettext("Your role does not allow creating tokens."))
    name = _clean_name(name)
    if scope not in TokenScope.values:
        raise ValidationFailed(gettext("Unknown scope."), details={"scope": [gettext("Choose read or write.")]})
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationFailed(gettext("The expiry must be in the future."), details={"expires_at": [gettext("Must be in the future.")]})
    secret = token_generate()
    with transaction.atomic():
        token = ApiToken.objects.create(organization=membership.organization, user=membership.user, name=name,
                                        scope=scope, prefix=token_display_prefix(secret),
                                        token_hash=token_hash(secret), expires_at=expires_at)
        audit_record(action="token.create", org=membership.organization, actor=membership.user, target=token,
                     request=request, details={"name": name, "scope": scope, "prefix": token.prefix,
                                               "expires_at": expires_at.isoformat() if expires_at else None})
    return token, secret


def token_revoke(*, token: ApiToken, actor, request=None) -> ApiToken:
    """Revoke a token (fetch it with selectors.token_get first); it stops authenticating at once."""
    with transaction.atomic():
        updated = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=Now())
        if updated:
            audit_record(action="token.revoke", org=token.organization, actor=actor, target=token, request=request,
                         details={"name": token.name, "prefix": token.prefix})
    token.refresh_from_db(fields=["revoked_at"])
    return token


def token_touch(*, token: ApiToken) -> None:
    """Record use; the conditional UPDATE keeps it to one write a minute even under concurrency."""
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_RESOLUTION:
        return
    ApiToken.objects.filter(pk=token.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=Now() - LAST_USED_RESOLUTION)
    ).update(last_used_at=Now())


def ssh_key_add(*, user, name: str, public_key: str, org=None, request=None) -> SshKey:
    """Validate and store one of the user's SSH public keys (ed25519, ecdsa, rsa ≥ 2048)."""
    name = _clean_name(name)
    parsed = ssh_key_parse(public_key)
    duplicate = ValidationFailed(gettext("You have already added this key."),
                                 details={"public_key": [gettext('Already added (%(fingerprint)s).') % {'fingerprint': parsed.fingerprint}]})
    if SshKey.objects.filter(user=user, fingerprint=parsed.fingerprint).exists():
        raise duplicate
    try:
        with transaction.atomic():
            key = SshKey.objects.create(user=user, name=name, key_type=parsed.key_type,
                                        public_key=parsed.public_key, fingerprint=parsed.fingerprint)
            audit_record(action="ssh_key.add", org=org, actor=user, target=key, request=request,
                         details={"name": name, "fingerprint": key.fingerprint})
    except IntegrityError:  # a concurrent add of the same key
        raise duplicate from None
    return key


def ssh_key_delete(*, key: SshKey, actor, org=None, request=None) -> None:
    """Delete one of the user's keys (fetch it with selectors.ssh_key_get first)."""
    with transaction.atomic():
        audit_record(action="ssh_key.delete", org=org, actor=actor, target=key, request=request,
                     details={"name": key.name, "fingerprint": key.fingerprint})
        key.delete()
