"""Single sign-on (OpenID Connect through django-allauth): the accounts a first sign-in creates, and the
organizations bound to an email domain or an identity provider that such a newcomer joins."""
import codecs
import re

from allauth.socialaccount.adapter import get_adapter as get_social_adapter
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.http import Http404
from django.utils import timezone
from django.utils.translation import gettext as _

from core.errors import PermissionDeniedError, ValidationFailed

from .audit import audit_record
from .choices import Role
from .models import Membership, SsoBinding, SsoBindingKind, User
from .services import user_mark_verified, user_signup

DOMAIN_RE = re.compile(r"^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9-]{2,63}$")


def sso_providers(request=None) -> list[tuple[str, str]]:
    """(provider id, name) of every OpenID Connect provider the operator configured (settings or admin)."""
    apps = get_social_adapter().list_apps(request, provider="openid_connect")
    return sorted({(app.provider_id, app.name or app.provider_id) for app in apps if app.provider_id})


def _domain_clean(value: str) -> str:
    value = (value or "").strip().lower().lstrip("@").rstrip(".")
    try:
        value = codecs.decode(codecs.encode(value, "idna"), "idna") if value else value
    except UnicodeError:
        pass
    ascii_form = value.encode("idna").decode("ascii") if value else ""
    if not DOMAIN_RE.match(ascii_form):
        raise ValidationFailed(_("The binding is invalid."), details={"value": [_("Enter a domain such as "
                                                                                  "lab.example.edu.cn.")]})
    return value


def _check_owner(actor_membership: Membership) -> None:
    if actor_membership.role != Role.OWNER:
        raise PermissionDeniedError(_("Only owners change the organization's sign-in rules."))


def sso_binding_create(*, actor_membership: Membership, kind: str, value: str, role: str,
                       request=None) -> SsoBinding:
    """An owner asks that SSO newcomers from a domain or an IdP join the organization with `role`; it applies
    once an operator approves it (sso_binding_approve)."""
    _check_owner(actor_membership)
    errors = {}
    if kind not in SsoBindingKind.values:
        errors["kind"] = [_("Choose email_domain or idp.")]
    if role not in Role.values or role == Role.OWNER:  # ownership is given by an owner, never by a sign-in
        errors["role"] = [_("Choose admin, member, billing or viewer.")]
    if errors:
        raise ValidationFailed(_("The binding is invalid."), details=errors)
    if kind == SsoBindingKind.EMAIL_DOMAIN:
        value = _domain_clean(value)
    else:
        value = (value or "").strip()
        if value not in {pid for pid, _name in sso_providers(request)}:
            raise ValidationFailed(_("The binding is invalid."),
                                   details={"value": [_("No identity provider with this id is configured.")]})
    org = actor_membership.organization
    try:
        with transaction.atomic():
            binding = SsoBinding.objects.create(organization=org, kind=kind, value=value, role=role,
                                                created_by=actor_membership.user)
            audit_record(action="sso_binding.create", org=org, actor=actor_membership.user, target=binding,
                         request=request, details={"kind": kind, "value": value, "role": role})
    except IntegrityError:
        raise ValidationFailed(_("The binding is invalid."),
                               details={"value": [_("This organization already has this binding.")]}) from None
    return binding


def sso_binding_delete(*, actor_membership: Membership, binding: SsoBinding, request=None) -> None:
    _check_owner(actor_membership)
    with transaction.atomic():
        audit_record(action="sso_binding.delete", org=binding.organization, actor=actor_membership.user,
                     target=binding, request=request,
                     details={"kind": binding.kind, "value": binding.value, "role": binding.role})
        binding.delete()


def sso_binding_approve(*, operator, binding: SsoBinding, request=None) -> SsoBinding:
    """An operator confirms the organization speaks for the domain or IdP (staff only; audited)."""
    if not (operator.is_active and operator.is_staff):
        raise PermissionDeniedError(_("Only operators approve SSO bindings."))
    try:
        with transaction.atomic():
            binding = SsoBinding.objects.select_for_update().get(pk=binding.pk)
            if binding.approved_at is not None:
                return binding
            binding.approved_at, binding.approved_by = timezone.now(), operator
            binding.save(update_fields=["approved_at", "approved_by"])
            audit_record(action="sso_binding.approve", org=binding.organization, actor=operator, target=binding,
                         request=request, details={"kind": binding.kind, "value": binding.value,
                                                   "role": binding.role})
    except IntegrityError:
        raise ValidationFailed(_("Another organization's approved binding has this domain or IdP."),
                               details={"value": [_("Already bound to another organization.")]}) from None
    return binding


def sso_bindings_matching(*, email: str, provider_id: str):
    """The approved bindings for this address (its domain or a parent domain) or this IdP."""
    domain = email.rsplit("@", 1)[-1].lower()
    parts = domain.split(".")
    domains = {".".join(parts[i:]) for i in range(len(parts) - 1)}
    return (SsoBinding.objects.select_related("organization").filter(approved_at__isnull=False)
            .filter(Q(kind=SsoBindingKind.EMAIL_DOMAIN, value__in=domains)
                    | Q(kind=SsoBindingKind.IDP, value=provider_id)).order_by("created_at"))


def sso_user_create(*, email: str, name: str, provider_id: str, request=None) -> tuple[User, list[Membership]]:
    """A first SSO sign-in: the account (no password; sign-in goes through the IdP), its personal organization,
    the email verified at once (the IdP vouched for it; the trial follows the one-per-mailbox rule), and a
    membership in each organization bound to the address's domain or this IdP, with the binding's role."""
    with transaction.atomic():
        user = user_signup(email=email, password=None, name=name, request=request)
        user_mark_verified(user=user, request=request)
        user.refresh_from_db()  # the caller saves it again (allauth): with email_verified_at, not without
        joined = []
        for binding in sso_bindings_matching(email=user.email, provider_id=provider_id):
            membership, created = Membership.objects.get_or_create(
                organization=binding.organization, user=user, defaults={"role": binding.role})
            if created:
                joined.append(membership)
                audit_record(action="member.sso_join", org=binding.organization, actor=user, target=membership,
                             request=request, details={"email": user.email, "role": binding.role,
                                                       "binding": str(binding.pk), "kind": binding.kind,
                                                       "value": binding.value})
    return user, joined


def sso_binding_get(*, org, id) -> SsoBinding:
    """One binding of this organization, else 404."""
    binding = SsoBinding.objects.filter(organization=org, pk=id).first()
    if binding is None:
        raise Http404(_("No such SSO binding."))
    return binding


def sso_binding_list(*, org):
    return SsoBinding.objects.filter(organization=org).order_by("kind", "value", "id")
