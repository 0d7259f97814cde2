"""SPEC §5 role × token-scope matrix for the billing, provisioning and catalog endpoints (bearer tokens).

Written from SPEC §5's table, not derived from tenancy.permissions (tenancy's own endpoints are in
tests/tenancy/test_api_matrix.py).
"""
import pytest

from .conftest import assert_envelope

pytestmark = pytest.mark.django_db

ROLES = ["owner", "admin", "member", "billing", "viewer"]
EVERY = set(ROLES)
READ = {"owner", "admin", "member", "viewer"}  # "all but billing" readers of instances
READ_BILLING = {"owner", "admin", "member", "billing"}
INSTANCES = {"owner", "admin", "member"}
BILLING = {"owner", "admin", "billing"}
WEBHOOKS = {"owner", "admin"}
ACCEPTED = {200, 201, 202, 409}  # an allowed action may still be refused by the transition table

# name: (method, path, roles allowed, is a read (so `read` tokens may call it), expected statuses)
MATRIX = {
    "balance": ("get", "/api/v1/billing/balance/", READ_BILLING, True, {200}),
    "transfers": ("get", "/api/v1/billing/transfers/", READ_BILLING, True, {200}),
    "usage": ("get", "/api/v1/billing/usage/", READ_BILLING, True, {200}),
    "topups_list": ("get", "/api/v1/billing/topups/", READ_BILLING, True, {200}),
    "topup_get": ("get", "/api/v1/billing/topups/{topup}/", READ_BILLING, True, {200}),
    "topup_create": ("post", "/api/v1/billing/topups/", BILLING, False, {201}),
    "sponsorships_list": ("get", "/api/v1/billing/sponsorships/", READ_BILLING, True, {200}),
    "sponsorship_get": ("get", "/api/v1/billing/sponsorships/{sponsorship}/", READ_BILLING, True, {200}),
    "sponsorship_create": ("post", "/api/v1/billing/sponsorships/", BILLING, False, {201}),
    "fapiao_list": ("get", "/api/v1/billing/fapiao/", READ_BILLING, True, {200}),
    "fapiao_available": ("get", "/api/v1/billing/fapiao/available/", READ_BILLING, True, {200}),
    "fapiao_create": ("post", "/api/v1/billing/fapiao/", BILLING, False, {201}),
    "fapiao_get": ("get", "/api/v1/billing/fapiao/{fapiao}/", READ_BILLING, True, {200}),
    "fapiao_cancel": ("post", "/api/v1/billing/fapiao/{fapiao}/cancel/", BILLING, False, {200}),
    "fapiao_pdf": ("get", "/api/v1/billing/fapiao/{fapiao_issued}/pdf/", READ_BILLING, True, {200}),
    "invoices_list": ("get", "/api/v1/billing/invoices/", READ_BILLING, True, {200}),
    "invoice_pay": ("post", "/api/v1/billing/invoices/{invoice}/pay/", BILLING, False, {201}),
    "statements_list": ("get", "/api/v1/billing/statements/", READ_BILLING, True, {200}),
    "statement_get": ("get", "/api/v1/billing/statements/{month}/", READ_BILLING, True, {200}),
    "statement_csv": ("get", "/api/v1/billing/statements/{month}.csv", READ_BILLING, True, {200}),
    "instances_list": ("get", "/api/v1/instances/", READ, True, {200}),
    "instance_get": ("get", "/api/v1/instances/{instance}/", READ, True, {200}),
    "instance_events": ("get", "/api/v1/instances/{instance}/events/", READ, True, {200}),
    "instance_readiness": ("get", "/api/v1/instances/{instance}/readiness/", READ, True, {200}),
    "instance_create": ("post", "/api/v1/instances/", INSTANCES, False, {201}),
    "instance_stop": ("post", "/api/v1/instances/{instance}/stop/", INSTANCES, False, ACCEPTED),
    "instance_start": ("post", "/api/v1/instances/{instance}/start/", INSTANCES, False, ACCEPTED),
    "instance_move": ("post", "/api/v1/instances/{instance}/move/", INSTANCES, False, ACCEPTED),
    "instance_delete": ("delete", "/api/v1/instances/{instance}/", INSTANCES, False, {202}),
    "instance_package_renewal": ("post", "/api/v1/instances/{monthly}/package-renewal/", INSTANCES, False, {200}),
    "quote": ("post", "/api/v1/quotes/", READ, True, {200}),
    "instance_ports": ("get", "/api/v1/instances/{instance}/ports/", READ, True, {200}),
    "instance_port_add": ("post", "/api/v1/instances/{instance}/ports/", INSTANCES, False, {201}),
    "instance_port_remove": ("delete", "/api/v1/instances/{ported}/ports/9100/", INSTANCES, False, {200}),
    "instance_port_shares": ("get", "/api/v1/instances/{instance}/ports/8888/shares/", READ, True, {200}),
    "instance_port_share": ("post", "/api/v1/instances/{instance}/ports/8888/shares/", INSTANCES, False, {201}),
    "instance_port_share_revoke": ("delete", "/api/v1/instances/{instance}/shares/{share}/", INSTANCES, False,
                                   {200}),
    "custom_images_list": ("get", "/api/v1/custom-images/", READ, True, {200}),
    "custom_image_get": ("get", "/api/v1/custom-images/{custom_image}/", READ, True, {200}),
    # No registry answers here: an allowed caller gets past the role check to the registry check's 400.
    "custom_image_register": ("post", "/api/v1/custom-images/", INSTANCES, False, {400}),
    "custom_image_delete": ("delete", "/api/v1/custom-images/{custom_image}/", INSTANCES, False, {204}),
    # No IMAGE_SAVE_REGISTRY here: an allowed caller gets the 409 that says so.
    "instance_save_image": ("post", "/api/v1/instances/{instance}/save-image/", INSTANCES, False, ACCEPTED),
    "accelerators": ("get", "/api/v1/accelerators/", EVERY, True, {200}),
    "zones": ("get", "/api/v1/zones/", EVERY, True, {200}),
    "images": ("get", "/api/v1/images/", EVERY, True, {200}),
    "admin_nodes": ("get", "/api/v1/admin-api/nodes/", set(), True, {200}),  # staff only
    "volumes_list": ("get", "/api/v1/volumes/", READ, True, {200}),
    "volume_get": ("get", "/api/v1/volumes/{volume}/", READ, True, {200}),
    "volume_create": ("post", "/api/v1/volumes/", INSTANCES, False, {201}),
    "volume_grow": ("patch", "/api/v1/volumes/{volume}/", INSTANCES, False, {200}),
    "volume_delete": ("delete", "/api/v1/volumes/{volume}/", INSTANCES, False, {204}),
    "instance_volume_attach": ("post", "/api/v1/instances/{stopped}/volumes/", INSTANCES, False, {201}),
    "instance_volume_detach": ("delete", "/api/v1/instances/{stopped}/volumes/{attached}/", INSTANCES, False, {200}),
    "datasets": ("get", "/api/v1/datasets/", EVERY, True, {200}),
    "dataset_get": ("get", "/api/v1/datasets/{dataset}/", EVERY, True, {200}),
    "storage_prices": ("get", "/api/v1/storage-prices/", EVERY, True, {200}),
    "volume_keys_list": ("get", "/api/v1/volumes/{shared_volume}/keys/", READ, True, {200}),
    "volume_key_get": ("get", "/api/v1/volumes/{shared_volume}/keys/{volume_key}/", READ, True, {200}),
    "volume_key_create": ("post", "/api/v1/volumes/{shared_volume}/keys/", INSTANCES, False, {201}),
    "volume_key_revoke": ("delete", "/api/v1/volumes/{shared_volume}/keys/{volume_key}/", INSTANCES, False, {204}),
    "webhooks_list": ("get", "/api/v1/webhooks/", WEBHOOKS, True, {200}),
    "webhook_event_types": ("get", "/api/v1/webhooks/event-types/", EVERY, True, {200}),
    "webhook_create": ("post", "/api/v1/webhooks/", WEBHOOKS, False, {201}),
    "webhook_get": ("get", "/api/v1/webhooks/{webhook}/", WEBHOOKS, True, {200}),
    "webhook_update": ("patch", "/api/v1/webhooks/{webhook}/", WEBHOOKS, False, {200}),
    "webhook_delete": ("delete", "/api/v1/webhooks/{webhook}/", WEBHOOKS, False, {204}),
    "webhook_rotate": ("post", "/api/v1/webhooks/{webhook}/rotate-secret/", WEBHOOKS, False, {201}),
    "webhook_deliveries": ("get", "/api/v1/webhooks/{webhook}/deliveries/", WEBHOOKS, True, {200}),
    "webhook_resend": ("post", "/api/v1/webhooks/{webhook}/deliveries/{delivery}/resend/", WEBHOOKS, False, {202}),
}
NEEDS_STRIPE = {"topup_create", "invoice_pay"}
NEEDS_S3 = {"volume_key_create", "volume_key_revoke"}  # a real S3 + IAM server (moto, tests/storage/s3_server.py)


def _world(actor) -> dict:
    from datetime import timedelta

    from django.utils import timezone

    from billing.models_payments import TopUp
    from billing.models_products import Invoice, SponsorshipProposal
    from provisioning.models import PortShare
    from tests.factories.billing import fund
    from tests.factories.inventory import custom_image
    from tests.factories.provisioning import InstanceFactory, make_fleet
    from webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookEvent

    from .registry import _this_month

    org = actor.organization
    make_fleet(h100=1)
    fund(org, 1_000_000_000, key=f"security-matrix:{org.pk}")
    inst = InstanceFactory(organization=org, state="running")
    ported = InstanceFactory(organization=org, state="running", http_ports=[{"port": 9100, "name": "app"}])
    share = PortShare.objects.create(instance=inst, port=8888, secret_hash=f"{inst.pk.hex:0>64}",
                                     expires_at=timezone.now() + timedelta(hours=1))
    monthly = InstanceFactory(organization=org, state="running", billing="monthly", package_renewal="renew")
    topup = TopUp.objects.create(organization=org, amount=50_000_000, amount_fen=5_000)
    proposal = SponsorshipProposal.objects.create(organization=org, title="t", abstract="a",
                                                  accelerator="h100-sxm-80g", card_hours=5)
    invoice = Invoice.objects.create(organization=org, period="2026-01-01", amount_due=12_340_000)
    endpoint = WebhookEndpoint.objects.create(organization=org, url="https://93.184.216.34/m",
                                              event_types=["instance.running"])
    event = WebhookEvent.objects.create(id=f"msg_{org.pk.hex}", organization=org, type="instance.running",
                                        payload={}, dedupe_key="m", created_at=timezone.now())
    delivery = WebhookDelivery.objects.create(event=event, endpoint=endpoint, created_at=timezone.now(),
                                              state="failed")
    shared, key = _shared_volume(org)
    storage_ids = _storage(org, inst)
    fapiao_ids = _fapiao(org)
    return {"shared_volume": shared.pk, "volume_key": key.pk, "instance": inst.pk, "ported": ported.pk, "share": share.pk, "monthly": monthly.pk, "topup": topup.pk, "sponsorship": proposal.pk, "invoice": invoice.pk,
            "month": _this_month(), "webhook": endpoint.pk, "delivery": delivery.pk, **storage_ids, **fapiao_ids,
            "custom_image": custom_image(org).pk}


def _fapiao(org) -> dict:
    """A paid top-up (the rows a captured payment leaves), a fapiao requested over part of it and one issued."""
    from django.utils import timezone

    from billing.models_fapiao import FapiaoRequest
    from billing.models_payments import TopUp

    TopUp.objects.create(organization=org, amount=300_000_000, amount_fen=30_000, amount_received_fen=30_000,
                         state="succeeded", credited_at=timezone.now())
    asked = FapiaoRequest.objects.create(organization=org, kind="normal", amount=50_000_000, title="matrix")
    issued = FapiaoRequest.objects.create(organization=org, kind="normal", amount=50_000_000, title="matrix",
                                          state="issued", number="12345678", pdf=b"%PDF-1.7 matrix")
    return {"fapiao": asked.pk, "fapiao_issued": issued.pk}


def _storage(org, inst) -> dict:
    """A disk, a stopped instance holding another disk, a free one to attach, a dataset, a priced zone."""
    from storage.services import volume_attach
    from tests.factories.provisioning import InstanceFactory
    from tests.factories.storage import DatasetFactory, make_volume

    zone = inst.zone or __import__("tests.factories.inventory", fromlist=["ZoneFactory"]).ZoneFactory()
    free, attached = make_volume(org, zone, name="matrix-free"), make_volume(org, zone, name="matrix-attached")
    make_volume(org, zone, name="matrix-disk", kind="shared")  # both kinds priced in the zone
    stopped = InstanceFactory(organization=org, state="stopped", zone=zone)
    volume_attach(org=org, volume_id=attached.pk, instance_id=stopped.pk, zone_id=zone.pk)
    BODIES["volume_create"]["zone"] = zone.slug
    BODIES["instance_volume_attach"]["volume"] = str(free.pk)
    return {"volume": free.pk, "stopped": stopped.pk, "attached": attached.pk,
            "dataset": DatasetFactory(slug="wudao-corpus", zones=[zone]).slug}


def _shared_volume(org):
    """A shared volume of the organization and a key row of it (no S3 call: the reads and the refusals need none)."""
    from storage.access_keys import VolumeAccessKey
    from tests.factories.inventory import ZoneFactory
    from tests.factories.storage import make_volume

    volume = make_volume(org, ZoneFactory(), name="matrix-shared", kind="shared", size_gib=10)
    key = VolumeAccessKey.objects.create(volume=volume, organization=org, access_key_id=f"AKIA{volume.pk.hex[:16]}",
                                         secret_sha256="0" * 64, iam_user=f"cmx-{volume.pk}",
                                         bucket=f"cardmix-{volume.pk}")
    return volume, key


def _s3_key(org, ids) -> dict:
    """An allowed create or revoke talks to the S3 endpoint: the revoke gets a key that really exists there."""
    from storage.access_keys import access_key_create
    from storage.models import Volume

    key, _ = access_key_create(volume=Volume.objects.get(pk=ids["shared_volume"]))
    return {"volume_key": key.pk}


BODIES = {
    "topup_create": {"amount": "100.00"},
    "fapiao_create": {"kind": "normal", "title": "Tsinghua NLP Lab", "amount": "100.00"},
    "sponsorship_create": {"title": "LLM pre-training", "abstract": "A study.", "accelerator": "h100-sxm-80g",
                           "card_hours": 100},
    "instance_create": {"name": "m", "kind": "container", "items": [{"accelerator": "h100-sxm-80g", "count": 1}],
                        "image": "pytorch-2.3-cuda12.3"},
    "instance_package_renewal": {"package_renewal": "stop"},
    "instance_port_add": {"port": 9000, "name": "my app"},
    "instance_port_share": {"expires_in_hours": 2},
    "volume_create": {"name": "matrix-new", "kind": "disk", "size_gib": 10, "zone": ""},  # zone: _storage
    "volume_grow": {"size_gib": 200},  # make_volume: 100 GiB
    "instance_volume_attach": {"volume": "", "mount_path": "/scratch"},  # _storage: a free disk of the actor's organization
    "custom_image_register": {"name": "m", "reference": "127.0.0.1:9/team/m:1"},
    "instance_save_image": {"name": "m"},
    "webhook_create": {"url": "https://93.184.216.34/hook", "event_types": ["instance.running"]},
    "webhook_update": {"description": "changed"},
    "quote": {"kind": "container", "items": [{"accelerator": "h100-sxm-80g", "count": 1}],
              "image": "pytorch-2.3-cuda12.3"},
}


@pytest.mark.parametrize("scope", ["read", "write"])
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", list(MATRIX))
def test_role_scope_matrix(name, role, scope, member_factory, token_client_for, catalog, request):
    method, path, roles, is_read, ok = MATRIX[name]
    allowed = role in roles and (is_read or scope == "write")
    if name in NEEDS_STRIPE and allowed:
        request.getfixturevalue("stripe_env")
    if name in NEEDS_S3 and allowed:
        request.getfixturevalue("s3")
    actor = member_factory(role=role)
    ids = _world(actor)
    if name in NEEDS_S3 and allowed:
        ids.update(_s3_key(actor.organization, ids))
    client = token_client_for(actor, scope=scope)
    response = getattr(client, method)(path.format(**ids), BODIES.get(name), format="json")
    if allowed:
        assert response.status_code in ok, (response.status_code, response.content[:400])
    else:
        assert_envelope(response, 403, "permission_denied")


@pytest.mark.parametrize("name", list(MATRIX))
def test_no_credentials_is_401(name, api_client, member_factory, catalog):
    method, path, *_ = MATRIX[name]
    ids = _world(member_factory(role="owner"))
    assert_envelope(getattr(api_client, method)(path.format(**ids), BODIES.get(name), format="json"),
                    401, "not_authenticated")


@pytest.mark.parametrize("name", ["balance", "instances_list", "instance_create", "topup_create"])
def test_invalid_expired_revoked_tokens_are_401(name, member_factory, api_client, catalog):
    from datetime import timedelta

    from django.utils import timezone

    from tests.factories.tenancy import make_token

    method, path, *_ = MATRIX[name]
    actor = member_factory(role="owner")
    ids = _world(actor)
    _, expired = make_token(actor, expires_at=timezone.now() - timedelta(seconds=1))
    _, revoked = make_token(actor, revoked_at=timezone.now())
    for secret in ("cmx_not-a-real-token", expired, revoked, "x" * 300):
        api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        response = getattr(api_client, method)(path.format(**ids), BODIES.get(name), format="json")
        assert_envelope(response, 401, "token_invalid")
