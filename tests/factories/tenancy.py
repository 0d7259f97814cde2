"""Factories for users, organizations and memberships."""
import factory
from django.utils import timezone

from tenancy.choices import Role
from tenancy.models import Membership, Organization, User

PASSWORD = "correct-horse-battery-9"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        skip_postgeneration_save = True

    email = factory.Sequence(lambda n: f"user{n}@example.com")
    name = factory.Faker("name")
    email_verified_at = factory.LazyFunction(timezone.now)
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def _save(obj, create, extracted, **kwargs):
        if create:
            obj.save()


class OrganizationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Organization

    name = factory.Sequence(lambda n: f"Org {n}")
    slug = factory.Sequence(lambda n: f"org-{n}")
    # Verified by default, so tests of H100s and bare metal need no verification step; tests of the
    # unverified-organization policy pass real_name_verified_at=None (tests/tenancy/test_realname.py).
    real_name_verified_at = factory.LazyFunction(timezone.now)


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    organization = factory.SubFactory(OrganizationFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.OWNER


# --- API tokens and SSH keys (tenancy issue) ----------------------------------------------------

def make_token(membership, scope="write", *, name="test token", expires_at=None, revoked_at=None):
    """→ (ApiToken, secret) for the membership's user in its organization (no audit row)."""
    from tenancy.models import ApiToken
    from tenancy.token_secrets import token_display_prefix, token_generate, token_hash

    secret = token_generate()
    token = ApiToken.objects.create(organization=membership.organization, user=membership.user, name=name,
                                    scope=scope, prefix=token_display_prefix(secret), token_hash=token_hash(secret),
                                    expires_at=expires_at, revoked_at=revoked_at)
    return token, secret


def ed25519_public_key(comment: str = "test@cardmix") -> str:
    """A fresh, valid OpenSSH ed25519 public key line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate().public_key()
    line = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return f"{line} {comment}"


class SshKeyFactory(factory.django.DjangoModelFactory):
    """A valid ed25519 key of a user."""

    class Meta:
        model = "tenancy.SshKey"

    user = factory.SubFactory(UserFactory)
    name = factory.Sequence(lambda n: f"key {n}")
    key_type = "ssh-ed25519"
    public_key = factory.LazyFunction(ed25519_public_key)

    @factory.lazy_attribute
    def fingerprint(self):
        from tenancy.ssh_keys import ssh_key_parse

        return ssh_key_parse(self.public_key).fingerprint


def login_client(membership, client_class=None):
    """A test client logged in as the membership's user, with its organization current (console session)."""
    from django.test import Client

    from tenancy.middleware import SESSION_ORG_KEY

    client = (client_class or Client)()
    client.force_login(membership.user)
    session = client.session
    session[SESSION_ORG_KEY] = str(membership.organization_id)
    session.update(password_login_record(membership.user))
    session.save()
    return client


def password_login_record(user) -> dict:
    """The session keys django-allauth writes when a password was just given at its "confirm it's you" step, so
    the pages that ask for it (adding a second factor, removing a passkey) open as after that step."""
    import time

    from allauth.account.internal.flows.login import (
        _AUTHENTICATION_METHODS_USER_SESSION_KEY,
        AUTHENTICATION_METHODS_SESSION_KEY,
    )

    return {AUTHENTICATION_METHODS_SESSION_KEY: [{"method": "password", "at": time.time(), "email": user.email,
                                                   "reauthenticated": True}],
            _AUTHENTICATION_METHODS_USER_SESSION_KEY: str(user.pk)}


def session_key_for(membership) -> str:
    """A stored session for the membership (organization current), for a real browser's cookie."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    from tenancy.middleware import SESSION_ORG_KEY

    session = SessionStore()
    session[SESSION_KEY] = str(membership.user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = membership.user.get_session_auth_hash()
    session[SESSION_ORG_KEY] = str(membership.organization_id)
    session.update(password_login_record(membership.user))
    session.create()
    return session.session_key
