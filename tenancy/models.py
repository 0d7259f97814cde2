"""Users log in by email; an Organization is the tenant; a Membership gives a user a role in one."""
import codecs
import unicodedata
import uuid

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, BaseUserManager, PermissionsMixin
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy

from .choices import Role


def normalize_email(email: str) -> str:
    """The one spelling of an address: NFKC, no surrounding space, lower case, and the domain in the form
    mail is delivered to (IDNA nameprep), so `ada@ｅxample.com` is `ada@example.com` and gets no second trial."""
    email = unicodedata.normalize("NFKC", email or "").strip()
    local, at, domain = email.rpartition("@")
    if at:
        try:
            domain = codecs.decode(codecs.encode(domain, "idna"), "idna")
        except UnicodeError:  # not a valid domain: the form's validator says so, not this
            pass
        email = f"{local}@{domain}"
    return email.lower()


def default_card_quota() -> int:
    """settings.DEFAULT_CARD_QUOTA, read when an organization is created."""
    return settings.DEFAULT_CARD_QUOTA


class UserManager(BaseUserManager):
    """Creates users keyed by normalised email."""

    use_in_migrations = True

    def get_by_natural_key(self, email):
        """Login looks the address up as it is stored, so `Ada@Example.com` logs in too."""
        return self.get(email=normalize_email(email))

    def create_user(self, email, password=None, **extra):
        if not email:
            raise ValueError("An email address is required.")
        user = self.model(email=normalize_email(email), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_superuser(self, email, password=None, **extra):
        extra.setdefault("is_staff", True)
        extra.setdefault("is_superuser", True)
        extra.setdefault("email_verified_at", timezone.now())
        return self.create_user(email, password, **extra)


class User(AbstractBaseUser, PermissionsMixin):
    """A person; logs in with email + password."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    email = models.EmailField(unique=True)
    name = models.CharField(max_length=150, blank=True)
    is_staff = models.BooleanField(default=False)
    is_active = models.BooleanField(default=True)
    email_verified_at = models.DateTimeField(null=True, blank=True)
    date_joined = models.DateTimeField(default=timezone.now)
    # The console's and emails' language (settings.LANGUAGES); blank: the browser's (Accept-Language), else English.
    language = models.CharField(max_length=10, blank=True, default="", choices=settings.LANGUAGES)

    objects = UserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    REQUIRED_FIELDS: list[str] = []

    def save(self, *args, **kwargs):
        self.email = normalize_email(self.email)
        super().save(*args, **kwargs)

    def __str__(self):
        return self.email


class Organization(models.Model):
    """The tenant: everything a customer owns belongs to exactly one organization."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=150)
    slug = models.SlugField(max_length=80, unique=True)
    is_personal = models.BooleanField(default=False)
    # Maximum concurrently allocated cards (SPEC §2); only staff change it.
    card_quota = models.PositiveIntegerField(default=default_card_quota)
    # When an operator (or the verification provider) approved its real-name verification (实名认证); until then
    # settings.REALNAME_UNVERIFIED_* limit what it may do (tenancy/realname/policy.py).
    real_name_verified_at = models.DateTimeField(null=True, blank=True)
    # Owners set it: every member needs a second factor (TOTP or a passkey) before any other console page.
    mfa_required = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="organizations")

    def __str__(self):
        return self.name


class Membership(models.Model):
    """A user's role in one organization."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["organization", "user"], name="membership_unique")]

    def __str__(self):
        return f"{self.user} in {self.organization} ({self.role})"


class SsoBindingKind(models.TextChoices):
    EMAIL_DOMAIN = "email_domain"
    IDP = "idp"


class SsoBinding(models.Model):
    """People signing in through SSO for the first time join this organization with `role`, when their
    IdP-verified email is in `value` (kind email_domain) or they came through the IdP `value` (kind idp).

    An owner asks for it; it applies once an operator approved it in the admin (a lab must not capture a whole
    university's sign-ins by naming its domain). One approved binding per domain or IdP.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="sso_bindings")
    kind = models.CharField(max_length=12, choices=SsoBindingKind.choices)
    value = models.CharField(max_length=253)  # a domain (lower case, IDNA) or an openid_connect provider id
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")

    class Meta:
        ordering = ["kind", "value"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "kind", "value"], name="ssobinding_unique_per_org"),
            models.UniqueConstraint(fields=["kind", "value"], condition=models.Q(approved_at__isnull=False),
                                    name="ssobinding_one_approved"),
        ]

    def __str__(self):
        return f"{self.get_kind_display()} {self.value} → {self.organization} ({self.role})"


class AuditEvent(models.Model):
    """Append-only: who did what to which object, in which organization, from where (SPEC §2)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="audit_events")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    action = models.CharField(max_length=80)  # e.g. "instance.create", "node.drain"
    target_type = models.CharField(max_length=60, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=300, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["organization", "-created_at"])]

    def __str__(self):
        return f"{self.action} {self.target_type}:{self.target_id}"


class TokenScope(models.TextChoices):
    READ = "read", gettext_lazy('Read')
    WRITE = "write", gettext_lazy('Write')


class ApiToken(models.Model):
    """A user's API credential within one organization; only the sha256 of the secret is stored."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="api_tokens")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    scope = models.CharField(max_length=5, choices=TokenScope.choices, default=TokenScope.WRITE)
    prefix = models.CharField(max_length=16)  # the first characters of the secret, for display
    token_hash = models.CharField(max_length=64, unique=True)  # hex sha256 of the whole secret
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["organization", "user", "-created_at"])]

    def __str__(self):
        return f"{self.prefix}… ({self.name})"


class SshKey(models.Model):
    """A user's SSH public key, usable in every organization the user is in."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ssh_keys")
    name = models.CharField(max_length=100)
    key_type = models.CharField(max_length=40)  # e.g. ssh-ed25519
    public_key = models.TextField()  # one line, "type base64 [comment]"
    fingerprint = models.CharField(max_length=60)  # "SHA256:…" like ssh-keygen -l
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["user", "fingerprint"], name="sshkey_unique_per_user")]

    def __str__(self):
        return f"{self.name} {self.fingerprint}"


class TrialClaim(models.Model):
    """One trial credit per verified mailbox, ever: survives deleting the account."""

    email = models.EmailField(primary_key=True)  # normalised, as the claimant typed it
    # tenancy/mailbox.py's key (ada+1@gmail.com, a.da@gmail.com → ada@gmail.com): what the rule compares. NULL
    # (which may repeat under the unique constraint, unlike "") only on claims older than the key whose mailbox an
    # earlier claim already held (see migration 0004).
    mailbox = models.CharField(max_length=254, unique=True, null=True, editable=False)  # noqa: DJ001
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    organization = models.ForeignKey(Organization, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    claimed_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.email


from .models_realname import *  # noqa: E402,F401,F403  (real-name verification)
