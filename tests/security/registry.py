"""Every URL pattern of the project, classified for the isolation walk.

- OBJECT_FACTORIES: patterns whose URL names an object. A factory builds that object in organization A
  (`world.a`) and returns a Target (URL kwargs, the expected status for a member of organization B,
  the row whose fields must stay unchanged).
- TENANT_LISTS: patterns without an object id that answer per organization (lists, balances, forms):
  a member of B must see none of A's marker strings there.
- SKIP: patterns that are not reachable as a tenant (public pages, signed links, schema, health,
  metrics, the Stripe webhook, agent endpoints with their own node-token auth); Django's own admin
  (namespace `admin`) is skipped as a whole and counted separately.

A pattern in none of these fails tests/security/test_isolation.py, so a new endpoint cannot slip through.
"""
from dataclasses import dataclass, field
from datetime import date

from django.conf import settings
from django.db import models
from django.utils import timezone

NOT_FOUND, FORBIDDEN, OK = 404, 403, 200


@dataclass
class Target:
    """What a factory made: URL kwargs, what B must get, and the row that must not change."""

    kwargs: dict
    expect: int = NOT_FOUND
    row: models.Model | None = None
    body: dict = field(default_factory=dict)


def _this_month() -> str:
    from zoneinfo import ZoneInfo

    return timezone.now().astimezone(ZoneInfo(settings.BILLING_TIME_ZONE)).strftime("%Y-%m")


# --- factories: each builds one object of organization A -------------------------------------

def member(world):
    from tests.factories.tenancy import MembershipFactory

    m = MembershipFactory(organization=world.a.organization, role="member")
    return Target({"id": m.pk}, row=m, body={"role": "viewer"})


def token(world):
    from tests.factories.tenancy import make_token

    t, _ = make_token(world.a, name="a-token")
    return Target({"id": t.pk}, row=t)


def ssh_key(world):
    from tests.factories.tenancy import SshKeyFactory

    k = SshKeyFactory(user=world.a.user, name="a-ssh-key")
    return Target({"id": k.pk}, row=k)


def topup(world):
    from billing.models_payments import TopUp

    t = TopUp.objects.create(organization=world.a.organization, amount=77_000_000, amount_fen=7_700,
                             client_secret=world.marker("pi_secret"))
    return Target({"id": t.pk}, row=t)


def sponsorship(world):
    from billing.models_products import SponsorshipProposal

    p = SponsorshipProposal.objects.create(organization=world.a.organization, title=world.marker("proposal"),
                                           abstract="abstract", accelerator="h100-sxm-80g", card_hours=10)
    return Target({"id": p.pk}, row=p)


def realname(world):
    from tenancy.models_realname import RealNameVerification

    v = RealNameVerification.objects.create(organization=world.a.organization, kind="enterprise",
                                            legal_name=world.marker("realname"), credit_code="91330100716105852F",
                                            state="rejected", reason=world.marker("realname-reason"))
    return Target({"id": v.pk}, row=v)


def fapiao(world):
    from billing.models_fapiao import FapiaoRequest

    f = FapiaoRequest.objects.create(organization=world.a.organization, kind="normal", amount=10_000_000,
                                     title=world.marker("fapiao"), state="issued", number="87654321",
                                     pdf=b"%PDF-1.7 " + world.marker("fapiao-pdf").encode())
    return Target({"id": f.pk}, row=f)


def invoice(world):
    from billing.models_products import Invoice

    inv = Invoice.objects.create(organization=world.a.organization, period=date(2026, 1, 1), amount_due=5_000_000)
    return Target({"id": inv.pk}, row=inv)


def instance(world):
    from tests.factories.provisioning import InstanceFactory

    inst = InstanceFactory(organization=world.a.organization, name=world.marker("instance"), state="running")
    return Target({"instance_id": str(inst.pk)}, row=inst)


def instance_port(world):
    """A's running instance with a user-added port 9100 (the image declares 8888 and 6006)."""
    from tests.factories.provisioning import InstanceFactory

    inst = InstanceFactory(organization=world.a.organization, name=world.marker("ported"), state="running",
                           http_ports=[{"port": 9100, "name": world.marker("port")}])
    return Target({"instance_id": str(inst.pk), "port": 9100}, row=inst, body={"port": 9200, "expires_in_hours": 1})


def instance_ports(world):
    target = instance_port(world)
    return Target({"instance_id": target.kwargs["instance_id"]}, row=target.row, body={"port": 9200})


def proxied_port(world):
    target = instance_port(world)
    return Target({**target.kwargs, "rest": "api/status"}, row=target.row)


def port_share(world):
    from datetime import timedelta

    from provisioning.services.ports import port_share_create

    target = instance_port(world)
    share, _ = port_share_create(org=world.a.organization, instance_id=target.row.pk, port=9100,
                                 expires_in=timedelta(hours=1))
    return Target({"instance_id": target.kwargs["instance_id"], "share_id": str(share.pk)}, row=share)


def monthly_instance(world):
    from tests.factories.provisioning import InstanceFactory

    inst = InstanceFactory(organization=world.a.organization, name=world.marker("monthly"), state="running",
                           billing="monthly", package_renewal="renew")
    return Target({"instance_id": str(inst.pk)}, row=inst, body={"package_renewal": "stop"})


def instance_action(world):
    target = instance(world)
    return Target({**target.kwargs, "action": "stop"}, row=target.row)


def failed_instance(world):
    from tests.factories.provisioning import InstanceFactory

    inst = InstanceFactory(organization=world.a.organization, name=world.marker("failed"), state="failed")
    return Target({"instance_id": str(inst.pk)}, row=inst)


def instance_ledger_day(world):
    target = instance(world)
    return Target({**target.kwargs, "day": timezone.now().date().isoformat()}, row=target.row)


def statement_month(world):
    # A statement is keyed by month, not by id: B's own statement for the month A was active in.
    # A's distinctive top-up amount must not appear in it (checked by the marker scan).
    return Target({"month": _this_month()}, expect=OK)


def catalog_accelerator(world):
    return Target({"slug": "h100-sxm-80g"}, expect=OK)  # the shared catalog: the same for every tenant


def catalog_zone(world):
    from tests.factories.inventory import ZoneFactory

    return Target({"slug": ZoneFactory(slug="shared-zone").slug}, expect=OK)  # catalog too: the same for all


def catalog_image(world):
    return Target({"slug": "pytorch-2.3-cuda12.3"}, expect=OK)


def admin_node(world):
    from tests.factories.inventory import NodeFactory

    n = NodeFactory()
    return Target({"pk": n.pk}, expect=FORBIDDEN, row=n)


def admin_card(world):
    from inventory.models import Card

    n = admin_node(world).row
    c = Card.objects.filter(node=n).first()
    return Target({"pk": c.pk}, expect=FORBIDDEN, row=c, body={"health": "failed", "reason": "x"})


def admin_price(world):
    from inventory.models import Price

    p = Price.objects.order_by("pk").first()
    return Target({"pk": p.pk}, expect=FORBIDDEN, row=p)


def admin_image(world):
    from inventory.models import Image

    i = Image.objects.order_by("pk").first()
    return Target({"pk": i.pk}, expect=FORBIDDEN, row=i)


def volume_access_key(world):
    from storage.access_keys import VolumeAccessKey
    from tests.factories.billing import fund
    from tests.factories.inventory import ZoneFactory
    from tests.factories.storage import make_volume

    fund(world.a.organization, 1_000_000_000, key=f"isolation-volume:{world.a.organization.pk}")
    volume = make_volume(world.a.organization, ZoneFactory(), name="a-shared", kind="shared", size_gib=10)
    key = VolumeAccessKey.objects.create(volume=volume, organization=world.a.organization, name=world.marker("key"),
                                         access_key_id=f"AKIA{volume.pk.hex[:16].upper()}", secret_sha256="0" * 64,
                                         iam_user=f"cmx-{volume.pk}", bucket=f"cardmix-{volume.pk}")
    return Target({"volume_id": str(volume.pk), "key_id": str(key.pk)}, row=key, body={"name": "b"})


def volume_of_key(world):
    target = volume_access_key(world)
    return Target({"volume_id": target.kwargs["volume_id"]}, row=target.row, body={"name": "b"})


def volume(world):
    from tests.factories.billing import fund
    from tests.factories.inventory import ZoneFactory
    from tests.factories.storage import make_volume

    fund(world.a.organization, 1_000_000_000, key=f"isolation-disk:{world.a.organization.pk}")
    v = make_volume(world.a.organization, ZoneFactory(), name=world.marker("vol"), size_gib=10)
    return Target({"volume_id": str(v.pk)}, row=v, body={"size_gib": 20})


def stopped_instance_volume(world):
    """A's stopped instance with A's disk attached: B may neither attach to it nor detach from it."""
    from storage.services import volume_attach
    from tests.factories.provisioning import InstanceFactory

    target = volume(world)
    inst = InstanceFactory(organization=world.a.organization, name=world.marker("stopped"), state="stopped",
                           zone=target.row.zone)
    attachment = volume_attach(org=world.a.organization, volume_id=target.row.pk, instance_id=inst.pk,
                               zone_id=inst.zone_id)
    return Target({"instance_id": str(inst.pk), "volume_id": str(target.row.pk)}, row=attachment,
                  body={"volume": str(target.row.pk)})


def stopped_instance(world):
    target = stopped_instance_volume(world)
    return Target({"instance_id": target.kwargs["instance_id"]}, row=target.row, body=target.body)


def catalog_dataset(world):
    from tests.factories.storage import DatasetFactory

    return Target({"slug": DatasetFactory(slug="imagenet-1k").slug}, expect=OK)  # the shared library


def webhook_endpoint(world):
    from webhooks.models import WebhookEndpoint

    e = WebhookEndpoint.objects.create(organization=world.a.organization, url="https://93.184.216.34/a",
                                       description=world.marker("webhook"), event_types=["instance.running"])
    return Target({"id": e.pk}, row=e, body={"enabled": False})


def webhook_delivery(world):
    from core.dbclock import db_now
    from webhooks.models import WebhookDelivery, WebhookEvent

    target = webhook_endpoint(world)
    event = WebhookEvent.objects.create(id=world.marker("msg"), organization=world.a.organization,
                                        type="instance.running", payload={}, dedupe_key="k", created_at=db_now())
    d = WebhookDelivery.objects.create(event=event, endpoint=target.row, created_at=db_now(), state="failed")
    return Target({"id": target.row.pk, "delivery_id": d.pk}, row=d)


def custom_image(world):
    from tests.factories.inventory import custom_image as make

    image = make(world.a.organization, name=world.marker("image"),
                 reference=f"registry.example.com/{world.marker('repo')}/trainer:1.0")
    return Target({"image_id": str(image.pk)}, row=image)


def sso_binding(world):
    from tenancy.models import SsoBinding

    b = SsoBinding.objects.create(organization=world.a.organization, kind="email_domain",
                                  value=f"{world.marker('domain')}.example.edu.cn", role="member")
    return Target({"id": b.pk}, row=b)


def passkey(world):
    """A's WebAuthn authenticator (django-allauth's pages are per user: another user's key answers 404)."""
    from allauth.mfa.models import Authenticator

    a = Authenticator.objects.create(user=world.a.user, type=Authenticator.Type.WEBAUTHN,
                                     data={"name": world.marker("passkey"), "credential": {}})
    return Target({"pk": a.pk}, row=a, body={"name": "b"})


OBJECT_FACTORIES = {
    # tenancy: sign-in rules, and one's own passkeys (allauth's pages)
    "api:sso-binding-detail": sso_binding,
    "console:sso_binding_delete": sso_binding,
    "mfa_remove_webauthn": passkey,
    "mfa_edit_webauthn": passkey,
    # tenancy
    "api:member-detail": member,
    "api:token-detail": token,
    "api:ssh-key-detail": ssh_key,
    "console:member_update": member,
    "console:member_remove": member,
    "console:token_revoke": token,
    "console:ssh_key_delete": ssh_key,
    # catalog (shared, not tenant-owned: 200 for everyone)
    "api:accelerator-detail": catalog_accelerator,
    "api:image-detail": catalog_image,
    "api:zone-detail": catalog_zone,
    # staff admin API (operators only: 403 for a customer)
    "api:admin-node-detail": admin_node,
    "api:admin-node-drain": admin_node,
    "api:admin-node-undrain": admin_node,
    "api:admin-node-maintenance": admin_node,
    "api:admin-node-quarantine": admin_node,
    "api:admin-node-retire": admin_node,
    "api:admin-card-detail": admin_card,
    "api:admin-card-health": admin_card,
    "api:admin-price-detail": admin_price,
    "api:admin-image-detail": admin_image,
    # the organization's private images
    "api:custom-image-detail": custom_image,
    "console:custom_image_delete": custom_image,
    "api:instance-save-image": instance,
    "console:instance_save_image": instance,
    # billing
    "api:topup-detail": topup,
    "api:sponsorship-detail": sponsorship,
    "api:realname-detail": realname,
    "api:fapiao-detail": fapiao,
    "api:fapiao-cancel": fapiao,
    "api:fapiao-pdf": fapiao,
    "console:billing_fapiao_cancel": fapiao,
    "console:billing_fapiao_pdf": fapiao,
    "api:invoice-pay": invoice,
    "api:statement-detail": statement_month,
    "api:statement-csv": statement_month,
    "console:billing_topup_status": topup,
    "console:billing_statement": statement_month,
    "console:billing_statement_csv": statement_month,
    # provisioning
    "api:instance-detail": instance,
    "api:instance-stop": instance,
    "api:instance-start": instance,
    "api:instance-move": instance,
    "api:instance-package-renewal": monthly_instance,
    "api:instance-events": instance,
    "api:instance-readiness": instance,
    "api:instance-ports": instance_ports,
    "api:instance-port": instance_port,
    "api:instance-port-shares": instance_port,
    "api:instance-port-share": port_share,
    "console:proxy": proxied_port,
    "console:instance_port_add": instance_ports,
    "console:instance_port_open": instance_port,
    "console:instance_port_remove": instance_port,
    "console:instance_port_share": instance_port,
    "console:instance_share_revoke": port_share,
    "console:instance_detail": instance,
    "console:instance_action": instance_action,
    "console:instance_package_renewal": monthly_instance,
    "console:instance_retry": failed_instance,
    "console:billing_ledger_day": instance_ledger_day,
    # storage: volumes, attachments, the dataset library (shared: 200 for all)
    "api:volume-detail": volume,
    "api:instance-volumes": stopped_instance,
    "api:instance-volume-detail": stopped_instance_volume,
    "api:dataset-detail": catalog_dataset,
    # storage: S3 access keys of shared volumes
    "api:volume-key-list": volume_of_key,
    "api:volume-key-detail": volume_access_key,
    "console:volume_grow": volume,
    "console:volume_delete": volume,
    # webhooks
    "api:webhook-detail": webhook_endpoint,
    "api:webhook-rotate-secret": webhook_endpoint,
    "api:webhook-deliveries": webhook_endpoint,
    "api:webhook-delivery-resend": webhook_delivery,
    "console:webhook_detail": webhook_endpoint,
    "console:webhook_toggle": webhook_endpoint,
    "console:webhook_rotate": webhook_endpoint,
    "console:webhook_delete": webhook_endpoint,
    "console:webhook_resend": webhook_delivery,
}

# Per-organization pages without an object id: B must see none of A's markers there.
TENANT_LISTS = {
    "api:organization-current", "api:realname", "console:verification", "api:organization-export",
    "console:organization_export", "console:account_delete", "api:member-list", "api:token-list",
    "api:ssh-key-list", "api:audit-event-list",
    "api:accelerator-list", "api:image-list", "api:zone-list", "api:custom-image-list", "console:images",
    "api:admin-node-list", "api:admin-card-list", "api:admin-price-list", "api:admin-image-list",
    "api:billing-balance", "api:billing-transfers", "api:billing-usage", "api:topup-list",
    "api:sponsorship-list", "api:invoice-list", "api:statement-list", "api:fapiao-list", "api:fapiao-available",
    "api:instance-list", "api:quote",
    "api:volume-list", "api:dataset-list", "api:storage-price-list",
    "api:webhook-list", "api:webhook-event-types", "console:webhooks",
    "api:ping",  # observability: bench baseline, answers {"ok": true} only
    "console:dashboard", "console:organizations", "console:organization_switch", "console:members",
    "console:tokens", "console:ssh_keys", "console:billing_topup", "console:billing_statements",
    "console:billing_sponsorships", "console:billing_invoices", "console:billing", "console:billing_fapiao",
    "console:instance_list", "console:instance_new", "console:instance_quote",
    "console:member_invite", "console:organization_new",
    "console:storage",  # storage: the organization's volumes and the dataset library
    # accounts: the organization's sign-in rules; one's own second factors and SSO connections (django-allauth's
    # pages, per user: B's owner sees none of A's)
    "console:security", "api:sso-binding-list",
    "mfa_index", "mfa_reauthenticate", "mfa_activate_totp", "mfa_deactivate_totp", "mfa_view_recovery_codes",
    "mfa_generate_recovery_codes", "mfa_download_recovery_codes", "mfa_list_webauthn", "mfa_add_webauthn",
    "mfa_reauthenticate_webauthn", "socialaccount_connections", "account_reauthenticate",
}

SKIP = {
    "healthz": "public health check (no tenant data)",
    "metrics": "Prometheus metrics, own METRICS_TOKEN auth (tests/core/test_metrics.py)",
    "api:schema": "OpenAPI schema, public",
    "api:docs": "Swagger UI, public",
    "api:not-found": "catch-all: 404 in the error format",
    "api:stripe-webhook": "Stripe signature auth (tests/payments/test_webhook_security.py, test_secrets.py)",
    "api:agent-heartbeat": "node-token auth (tests/hardware/test_agent_api.py)",
    "api:agent-commands": "node-token auth (tests/hardware/test_agent_api.py)",
    "api:agent-command-start": "node-token auth; another node's command → 404 (tests/hardware/test_agent_lease.py)",
    "api:agent-command-result": "node-token auth; another node's command → 404 (tests/hardware)",
    "api:agent-enroll": "one-time enrollment secret, no tenant data (tests/hardware/test_node_token_revocation.py)",
    "console:landing": "public page",
    "console:login": "public page",
    "console:logout": "ends the session",
    "console:signup": "public page, allauth's sign-up (throttled: test_abuse.py)",
    "console:check_email": "public page",
    "console:verify_email": "signed link mailed before allauth: hands over to account_confirm_email",
    "console:account_delete_confirm": "signed one-time link (the person's own account, not an organization's)",
    "console:invitation_accept": "signed one-time link naming its organization (tests/console/test_teams.py)",
    "console:password_reset": "public page, allauth's reset request",
    "console:password_reset_done": "redirect to account_reset_password_done",
    "console:password_reset_confirm": "reset link mailed before allauth: redirect to account_reset_password_from_key",
    "console:password_reset_complete": "redirect to account_reset_password_from_key_done",
    # django-allauth: sign-in, verification and reset steps, and redirects to the console's own pages
    # (tests/accounts/, tests/tenancy/test_accounts.py, test_console_account.py)
    "account_login": "redirect to console:login",
    "account_signup": "redirect to console:signup",
    "account_reset_password": "redirect to console:password_reset",
    "account_reset_password_done": "public page",
    "account_reset_password_from_key": "signed one-time link (the token hashes the password)",
    "account_reset_password_from_key_done": "public page",
    "account_confirm_email": "signed link naming one address (verifies it once)",
    "account_email_verification_sent": "redirect to console:check_email",
    "account_email": "redirect to console:dashboard",
    "account_logout": "ends the session",
    "account_inactive": "public page",
    "mfa_authenticate": "the second step of a login in progress (tests/accounts/test_mfa.py)",
    "mfa_login_webauthn": "passkey login, public (tests/accounts/test_mfa_browser.py)",
    "openid_connect_login": "starts an SSO login at the provider (tests/accounts/test_sso.py)",
    "openid_connect_callback": "the provider's answer, bound to the session's state (tests/accounts/test_sso.py)",
    "socialaccount_login_cancelled": "public page",
    "socialaccount_login_error": "public page",
    "socialaccount_signup": "SSO sign-up form of a login in progress (session state)",
    "console:set_language": "the header's language switch: a cookie, and the caller's own User.language (tests/i18n)",
    "javascript-catalog": "the JavaScript translation catalog, public (no tenant data)",
}
SKIP_NAMESPACES = {"admin": "Django admin: staff only, behind is_staff login"}
