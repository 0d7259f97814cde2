"""Reads for tenancy; every organization-owned object is fetched with its organization (404 otherwise)."""
from functools import lru_cache

from django.db import connection
from django.db.models import Case, F, IntegerField, Q, Value, When
from django.db.models.functions import Now
from django.http import Http404

from .choices import Role
from .models import ApiToken, AuditEvent, Membership, Organization, SshKey, User


def membership_for_session(*, user, org_id=None):
    """The membership the console acts under: the chosen organization, else the oldest one."""
    qs = Membership.objects.select_related("organization").filter(user=user)
    if org_id:
        chosen = qs.filter(organization_id=org_id).first()
        if chosen is not None:
            return chosen
    return qs.order_by("created_at").first()


def memberships_of_user(*, user):
    """Every organization the user belongs to (for the switcher), oldest first."""
    return Membership.objects.select_related("organization").filter(user=user).order_by("created_at")


def membership_get_for_user(*, user, org_id) -> Membership:
    """The user's membership in one organization, else 404."""
    membership = Membership.objects.select_related("organization").filter(user=user, organization_id=org_id).first()
    if membership is None:
        raise Http404("No such organization.")
    return membership


def member_list(*, org):
    """The organization's memberships with their users, by role in Role's order (owners first), then age."""
    rank = Case(*(When(role=role, then=Value(i)) for i, role in enumerate(Role.values)), output_field=IntegerField())
    return Membership.objects.select_related("user").filter(organization=org).order_by(rank, "created_at", "id")


def member_get(*, org, id) -> Membership:
    """One membership of this organization, else 404."""
    membership = Membership.objects.select_related("user").filter(organization=org, pk=id).first()
    if membership is None:
        raise Http404("No such member.")
    return membership


def token_list(*, org, user):
    """The user's live (not revoked) tokens in this organization, newest first."""
    return ApiToken.objects.filter(organization=org, user=user, revoked_at__isnull=True).order_by("-created_at", "id")


def token_get(*, org, user, id) -> ApiToken:
    """One of the user's live tokens in this organization, else 404."""
    token = token_list(org=org, user=user).filter(pk=id).first()
    if token is None:
        raise Http404("No such token.")
    return token


def token_authenticate(*, token_hash: str) -> tuple[ApiToken, Membership] | None:
    """The live token with this hash and its user's current membership in the token's organization.

    Expiry is compared with the database clock; a token whose user left the organization
    (no membership) or was deactivated does not authenticate.
    """
    sql, params, hash_at, converters, parts = _token_statement()
    params = list(params)
    params[hash_at] = token_hash
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    row = list(row)
    for i, (convert, expression) in converters:
        for fn in convert:
            row[i] = fn(row[i], expression, connection)
    token, user, org, membership = (model.from_db(connection.alias, names, row[start:start + len(names)])
                                    for model, names, start in parts)
    if not user.is_active:
        return None
    token.user = membership.user = user  # loaded: no further queries
    token.organization = membership.organization = org
    return token, membership


@lru_cache(maxsize=1)
def _token_statement():
    """The token check as one statement compiled once per process (every API request makes it: building
    and compiling the query cost it 1.7-2.2 ms of CPU, ten times its execution): the token, its user, organization
    and membership, every column, joined. → (sql, params, the hash's place in them, converters by column, and per
    model its field names and first column)."""
    models = [(ApiToken, ""), (User, "user__"), (Organization, "organization__"),
              (Membership, "organization__memberships__")]
    parts, lookups = [], []
    for model, prefix in models:
        names = [f.attname for f in model._meta.concrete_fields]
        parts.append((model, names, len(lookups)))
        lookups += [prefix + name for name in names]
    qs = (ApiToken.objects.filter(token_hash=_TOKEN_SLOT, revoked_at__isnull=True)
          .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=Now()))
          .filter(organization__memberships__user_id=F("user_id"))
          .order_by().values_list(*lookups))
    compiler = qs.query.get_compiler(connection.alias)
    sql, params = compiler.as_sql()
    assert list(params).count(_TOKEN_SLOT) == 1, "the token hash is one parameter of the statement"
    converters = list(compiler.get_converters([col for col, _, _ in compiler.select]).items())
    return sql, tuple(params), list(params).index(_TOKEN_SLOT), converters, parts


_TOKEN_SLOT = "\x00token-hash-slot"



def ssh_key_list(*, user):
    """The user's SSH keys, newest first."""
    return SshKey.objects.filter(user=user).order_by("-created_at", "id")


def ssh_key_get(*, user, id) -> SshKey:
    """One of the user's SSH keys, else 404."""
    key = SshKey.objects.filter(user=user, pk=id).first()
    if key is None:
        raise Http404("No such SSH key.")
    return key


def ssh_keys_by_ids(*, user, ids) -> list[SshKey]:
    """The user's keys among `ids` (for instance creation); unknown or foreign ids are left out."""
    return list(SshKey.objects.filter(user=user, pk__in=list(ids)).order_by("created_at", "id"))


def ssh_keys_by_fingerprint(*, fingerprint: str) -> list[SshKey]:
    """Every active user's key with this fingerprint, with its user (the SSH gateway's login by public key)."""
    return list(SshKey.objects.select_related("user").filter(fingerprint=fingerprint, user__is_active=True)
                .order_by("created_at", "id"))


def ssh_key_active(*, user_id, key_id) -> bool:
    """Whether the key is still registered to this (still active) user: a gateway session's recheck."""
    return SshKey.objects.filter(pk=key_id, user_id=user_id, user__is_active=True).exists()


def audit_event_list(*, org):
    """The organization's audit log, newest first."""
    return AuditEvent.objects.select_related("actor").filter(organization=org).order_by("-created_at", "-id")


def organization_get_by_slug(*, slug) -> Organization:
    org = Organization.objects.filter(slug=slug).first()
    if org is None:
        raise Http404("No such organization.")
    return org


def user_exists(*, email) -> bool:
    """Whether an account with this email address exists."""
    return User.objects.filter(email=email).exists()


def members_to_tell(*, org_id, roles) -> list[tuple[str, str]]:
    """(email, language) of the organization's members with one of `roles`: the recipients of an email that
    core.mail.send_to_people writes in each one's language."""
    return list(Membership.objects.filter(organization_id=org_id, role__in=list(roles))
                .order_by("user__email").values_list("user__email", "user__language"))


def user_language(*, email) -> str:
    """The language setting of the account with this address ("" when none, or none set)."""
    return User.objects.filter(email=email).values_list("language", flat=True).first() or ""
