"""SPEC §5 Idempotency-Key on every creating POST: replay, reuse with another body, concurrent duplicates."""
import threading
import uuid

import pytest
from django.db import connection

from .conftest import assert_envelope
from .urlwalk import walk

ROUTES = {r.name: r for r in walk()}
# POSTs without an id that do not create a row of the caller's (previews, foreign-auth endpoints).
NOT_CREATING = {"api:quote", "api:stripe-webhook", "api:agent-heartbeat", "api:agent-commands",
                "api:agent-enroll"}
# POSTs on an id that do create something (paying an invoice creates a top-up).
CREATING_ON_ID = {"api:invoice-pay", "api:instance-port-shares"}


def _count(model_path: str, **filters):
    from django.apps import apps

    return lambda: apps.get_model(model_path).objects.filter(**filters).count()


def _case(name, ctx):
    """→ (url, body, other body, object counter) for one creating endpoint."""
    from billing.models_products import Invoice
    from tests.factories.tenancy import UserFactory, ed25519_public_key

    org = ctx["actor"].organization
    if name == "api:token-list":
        return "/api/v1/tokens/", {"name": "ci", "scope": "read"}, {"name": "ci2"}, _count("tenancy.ApiToken",
                                                                                       organization=org)
    if name == "api:ssh-key-list":
        return ("/api/v1/ssh-keys/", {"name": "k", "public_key": ed25519_public_key()},
                {"name": "k2", "public_key": ed25519_public_key()}, _count("tenancy.SshKey", user=ctx["actor"].user))
    if name == "api:member-list":
        return ("/api/v1/organizations/current/members/", {"email": UserFactory().email, "role": "viewer"},
                {"email": UserFactory().email, "role": "member"}, _count("tenancy.Membership", organization=org))
    if name == "api:instance-list":
        body = {"name": "idem", "kind": "container", "items": [{"accelerator": "h100-sxm-80g", "count": 1}],
                "image": "pytorch-2.3-cuda12.3"}
        return "/api/v1/instances/", body, {**body, "name": "other"}, _count("provisioning.Instance",
                                                                             organization=org)
    if name == "api:topup-list":
        return ("/api/v1/billing/topups/", {"amount": "100.00"}, {"amount": "200.00"},
                _count("billing.TopUp", organization=org))
    if name == "api:sponsorship-list":
        body = {"title": "t", "abstract": "a", "accelerator": "h100-sxm-80g", "card_hours": 10}
        return ("/api/v1/billing/sponsorships/", body, {**body, "card_hours": 11},
                _count("billing.SponsorshipProposal", organization=org))
    if name == "api:realname":
        org.real_name_verified_at = None
        org.save(update_fields=["real_name_verified_at"])
        body = {"kind": "individual", "legal_name": "韩梅梅", "id_number": "11010519491231002X"}
        return ("/api/v1/organizations/current/verification/", body, {**body, "legal_name": "李雷"},
                _count("tenancy.RealNameVerification", organization=org))
    if name == "api:fapiao-list":
        from billing.models_payments import TopUp
        from core.dbclock import db_now

        TopUp.objects.create(organization=org, amount=300_000_000, amount_fen=30_000, amount_received_fen=30_000,
                             state="succeeded", credited_at=db_now())
        body = {"kind": "normal", "title": "Tsinghua NLP Lab", "amount": "100.00"}
        return ("/api/v1/billing/fapiao/", body, {**body, "amount": "90.00"},
                _count("billing.FapiaoRequest", organization=org))
    if name == "api:invoice-pay":
        inv = Invoice.objects.create(organization=org, period="2026-02-01", amount_due=12_345_678)
        return (f"/api/v1/billing/invoices/{inv.pk}/pay/", {}, {"x": 1},
                _count("billing.TopUp", organization=org))
    if name == "api:admin-node-list":
        body = {"hostname": f"idem-{uuid.uuid4().hex[:6]}.test", "zone": "zone-a", "accelerator": "h100-sxm-80g"}
        return ("/api/v1/admin-api/nodes/", body, {**body, "card_count": 4}, _count("inventory.Node"))
    if name == "api:admin-price-list":
        body = {"accelerator": "h800-sxm-80g", "price_per_card_hour": "7.000000",
                "effective_from": "2030-01-01T00:00:00Z"}
        return ("/api/v1/admin-api/prices/", body, {**body, "price_per_card_hour": "7.100000"},
                _count("inventory.Price"))
    if name == "api:admin-image-list":
        body = {"slug": f"idem-{uuid.uuid4().hex[:6]}", "name": "x", "vendors": ["nvidia"]}
        return "/api/v1/admin-api/images/", body, {**body, "name": "y"}, _count("inventory.Image")
    if name == "api:volume-list":
        from inventory.models import Zone
        from tests.factories.storage import storage_prices

        storage_prices(Zone.objects.get(slug="zone-a"))
        body = {"name": "idem", "kind": "disk", "size_gib": 10, "zone": "zone-a"}
        return "/api/v1/volumes/", body, {**body, "size_gib": 20}, _count("storage.Volume", organization=org)
    if name == "api:webhook-list":
        body = {"url": "https://93.184.216.34/idem", "event_types": ["instance.running"]}
        return ("/api/v1/webhooks/", body, {**body, "event_types": ["balance.low"]},
                _count("webhooks.WebhookEndpoint", organization=org))
    if name == "api:instance-port-shares":
        from tests.factories.provisioning import InstanceFactory

        inst = InstanceFactory(organization=org, state="running")
        return (f"/api/v1/instances/{inst.pk}/ports/8888/shares/", {"expires_in_hours": 2}, {"expires_in_hours": 3},
                _count("provisioning.PortShare", instance=inst))
    if name == "api:custom-image-list":  # the registry is asked first: a real one on loopback
        registry = ctx["request"].getfixturevalue("image_registry")
        registry.push("team/trainer", "1.0")
        body = {"name": "trainer", "reference": f"{registry.host}/team/trainer:1.0", "username": "puller",
                "password": "right-pass"}
        return ("/api/v1/custom-images/", body, {**body, "name": "other"},
                _count("inventory.CustomImage", organization=org))
    if name == "api:sso-binding-list":
        body = {"kind": "email_domain", "value": "lab.example.edu.cn", "role": "member"}
        return ("/api/v1/organizations/current/sso-bindings/", body, {**body, "value": "lab2.example.edu.cn"},
                _count("tenancy.SsoBinding", organization=org))
    raise AssertionError(f"{name}: a creating POST without an idempotency case in {__file__}")


CREATING = sorted({n for n, r in ROUTES.items() if n.startswith("api:") and "post" in r.methods
                   and not r.kwargs and n not in NOT_CREATING} | CREATING_ON_ID)


def test_creating_endpoints_are_enumerated():
    """The list below is derived from the URLconf: a new creating POST gets a case or fails here."""
    known = {"api:token-list", "api:ssh-key-list", "api:member-list", "api:instance-list", "api:topup-list",
             "api:sponsorship-list", "api:invoice-pay", "api:admin-node-list", "api:admin-price-list",
             "api:admin-image-list", "api:volume-list", "api:webhook-list", "api:fapiao-list",
             "api:instance-port-shares", "api:realname", "api:custom-image-list",
             "api:sso-binding-list"}
    assert set(CREATING) == known, set(CREATING) ^ known


@pytest.fixture
def ctx(member_factory, token_client_for, catalog, stripe_env, request):
    from tests.factories.provisioning import funded, make_fleet

    make_fleet(h100=1)
    actor = funded(member_factory(role="owner"))
    actor.user.is_staff = True  # the admin API needs an operator; org endpoints the owner role
    actor.user.save(update_fields=["is_staff"])
    return {"actor": actor, "client": token_client_for(actor), "request": request}


@pytest.mark.django_db
@pytest.mark.parametrize("name", CREATING)
def test_same_key_replays_and_other_body_is_422(name, ctx):
    url, body, other, count = _case(name, ctx)
    client = ctx["client"]
    key = f"idem-{uuid.uuid4()}"
    before = count()
    first = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert first.status_code in (201, 202), first.content[:400]
    assert count() == before + 1
    again = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert again.status_code == first.status_code
    expected = first.json()
    if name == "api:token-list":  # secrets are never stored: the replay carries "token": null
        assert expected["token"].startswith("cmx_") and again.json()["token"] is None
        expected = {**expected, "token": None}
    if name == "api:instance-port-shares":  # the share link's secret likewise: "url": null
        assert "cardmix_share=" in expected["url"] and again.json()["url"] is None
        expected = {**expected, "url": None}
    assert again.json() == expected
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert count() == before + 1
    assert_envelope(client.post(url, other, format="json", HTTP_IDEMPOTENCY_KEY=key), 422, "idempotency_key_reused")
    # Without a key (or with a fresh one) the endpoint creates again: the key, not the body, dedupes.
    if name not in ("api:invoice-pay", "api:admin-price-list", "api:member-list", "api:realname"):
        fresh = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=f"idem-{uuid.uuid4()}")
        assert fresh.status_code in (201, 202, 400), fresh.content[:300]
    assert count() <= before + 2


@pytest.mark.django_db
def test_key_is_scoped_to_the_credential(ctx, token_client_for):
    """The same key from another token of the same user is a different request (scope includes credential)."""
    url, body, _, count = _case("api:sponsorship-list", ctx)
    key = "shared-key"
    before = count()
    assert ctx["client"].post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=key).status_code == 201
    other = token_client_for(ctx["actor"])
    assert other.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=key).status_code == 201
    assert count() == before + 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", CREATING)
def test_concurrent_duplicates_create_one_object(name, ctx):
    """N threads (N database connections) send the same key and body at once: exactly one object."""
    url, body, _, count = _case(name, ctx)
    secret = ctx["client"].secret
    key = f"race-{uuid.uuid4()}"
    before = count()
    barrier = threading.Barrier(4)
    results: list = []

    def send():
        from rest_framework.test import APIClient

        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        try:
            barrier.wait(timeout=10)
            r = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
            results.append((r.status_code, r.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 4
    statuses = sorted(s for s, _ in results)
    assert all(s in (201, 202, 409) for s in statuses), results
    assert any(s in (201, 202) for s in statuses), results
    for s, b in results:
        if s == 409:
            assert b["error"]["code"] == "idempotency_in_progress"
    assert count() == before + 1, results
