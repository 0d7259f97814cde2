"""Secrets (Stripe keys, BMC passwords, node and API tokens) never appear in logs, error pages or API output.

Each test exercises a path with the secret in play, capturing every log record at DEBUG (caplog, the
root logger and every named logger) and the process's stdout/stderr (capfd), then greps for the values.
"""
import logging
import uuid

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def leaks(caplog, capfd):
    """check(*secrets, outputs=[...]) → fails naming where a secret showed up."""
    caplog.set_level(logging.DEBUG)
    for name in ("django", "django.request", "stripe", "cardmix", "axes", "hardware", "billing", "tenancy"):
        caplog.set_level(logging.DEBUG, logger=name)

    def check(*secrets, outputs=()):
        out, err = capfd.readouterr()
        sources = {"logs": "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records) + caplog.text,
                   "stdout": out, "stderr": err}
        sources.update({f"output {i}": o if isinstance(o, str) else o.decode(errors="replace")
                        for i, o in enumerate(outputs)})
        found = [(s[:12] + "…", where) for s in secrets if s for where, text in sources.items() if s in text]
        assert not found, f"secret values found in: {found}"
        assert caplog.records or outputs  # something was captured: the check is not vacuous

    return check


def test_api_token_secret_is_shown_once_and_never_logged(member_factory, token_client_for, api_client, leaks):
    from tenancy.models import ApiToken

    client = token_client_for(member_factory(role="owner"))
    created = client.post("/api/v1/tokens/", {"name": "ci"}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    secret = created.json()["token"]
    assert secret.startswith("cmx_")
    replay = client.post("/api/v1/tokens/", {"name": "ci"}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert replay.json()["token"] is None
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    used = api_client.get("/api/v1/tokens/")
    assert used.status_code == 200
    wrong = secret[:-4] + "AAAA"
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {wrong}")
    refused = api_client.get("/api/v1/tokens/?x=1")
    assert refused.status_code == 401
    token = ApiToken.objects.get(pk=created.json()["id"])
    assert secret not in str(ApiToken.objects.filter(pk=token.pk).values().first())  # stored hashed
    leaks(secret, wrong, client.secret, outputs=[replay.content, used.content, refused.content])
    leaks(token.token_hash, outputs=[used.content])


def test_node_token_never_logged_or_shown(member_factory, token_client_for, api_client, leaks):
    from tests.factories.hardware import agent_node

    node, secret = agent_node()
    body = {"agent_version": "1.0", "hostname": node.hostname, "runtime": "process"}
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    ok = api_client.post("/api/v1/agent/heartbeat/", body, format="json")
    assert ok.status_code == 200
    forged = secret[:-6] + "ZZZZZZ"
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {forged}")
    assert api_client.post("/api/v1/agent/heartbeat/", body, format="json").status_code == 401
    staff = member_factory(role="owner")
    staff.user.is_staff = True
    staff.user.save(update_fields=["is_staff"])
    listing = token_client_for(staff).get("/api/v1/admin-api/nodes/")
    assert listing.status_code == 200
    leaks(secret, forged, outputs=[ok.content, listing.content])


def test_bmc_password_never_in_output(member_factory, token_client_for, settings, leaks, client):
    from cryptography.fernet import Fernet

    from hardware.models import BmcCredential
    from tests.factories.hardware import bmc_credential
    from tests.factories.inventory import NodeFactory

    settings.BMC_CREDENTIALS_KEY = Fernet.generate_key().decode()
    password = f"bmc-pass-{uuid.uuid4().hex}"
    cred = bmc_credential(name="rack1", password=password)
    NodeFactory(driver="redfish", bmc_address="https://10.0.0.9", bmc_credentials_ref="rack1")
    stored = str(BmcCredential.objects.filter(pk=cred.pk).values().first())
    assert password not in stored  # encrypted at rest
    staff = member_factory(role="owner")
    staff.user.is_staff = True
    staff.user.is_superuser = True
    staff.user.save(update_fields=["is_staff", "is_superuser"])
    listing = token_client_for(staff).get("/api/v1/admin-api/nodes/")
    client.force_login(staff.user)
    admin_list = client.get(f"/admin/{BmcCredential._meta.app_label}/{BmcCredential._meta.model_name}/")
    admin_page = client.get(f"/admin/{BmcCredential._meta.app_label}/{BmcCredential._meta.model_name}/{cred.pk}/change/")
    assert admin_list.status_code == 200 and admin_page.status_code == 200
    leaks(password, settings.BMC_CREDENTIALS_KEY, outputs=[listing.content, admin_list.content, admin_page.content])


def test_stripe_secrets_never_logged(member_factory, token_client_for, stripe_env, leaks):
    """A top-up against localstripe, and a webhook with a bad signature: keys stay out of logs and answers."""
    from tests.payments.conftest import sign

    client = token_client_for(member_factory(role="owner"))
    topup = client.post("/api/v1/billing/topups/", {"amount": "100.00"}, format="json")
    assert topup.status_code == 201
    payload = b'{"id": "evt_x", "type": "payment_intent.succeeded", "data": {"object": {"id": "pi_x"}}}'
    bad_signature = sign(payload, "whsec_not_the_right_secret")
    bad = client.post("/api/v1/billing/stripe/webhook/", payload, content_type="application/json",
                      HTTP_STRIPE_SIGNATURE=bad_signature)
    assert 400 <= bad.status_code < 500
    leaks(stripe_env.STRIPE_API_KEY, stripe_env.STRIPE_WEBHOOK_SECRET, outputs=[topup.content, bad.content])


@pytest.mark.urls("tests.security.urls")
def test_forced_500_shows_no_secrets(settings, client, api_client, leaks):
    settings.DEBUG = False
    settings.STRIPE_API_KEY = f"sk_live_{uuid.uuid4().hex}"
    settings.STRIPE_WEBHOOK_SECRET = f"whsec_{uuid.uuid4().hex}"
    settings.METRICS_TOKEN = f"metrics-{uuid.uuid4().hex}"
    api = api_client.get("/api/v1/boom/")
    assert api.status_code == 500 and api.json()["error"]["code"] == "internal_error"
    client.raise_request_exception = False
    page = client.get("/boom/")
    assert page.status_code == 500
    leaks(settings.STRIPE_API_KEY, settings.STRIPE_WEBHOOK_SECRET, settings.METRICS_TOKEN, settings.SECRET_KEY,
          outputs=[api.content, page.content])


@pytest.mark.urls("tests.security.urls")
def test_debug_error_page_cleanses_settings(settings, client):
    """Even with DEBUG on by mistake, Django's error page hides every key, token and secret setting."""
    from django.views.debug import SafeExceptionReporterFilter

    settings.DEBUG = True
    settings.STRIPE_API_KEY = f"sk_live_{uuid.uuid4().hex}"
    settings.BMC_CREDENTIALS_KEY = f"bmc-{uuid.uuid4().hex}"
    settings.METRICS_TOKEN = f"metrics-{uuid.uuid4().hex}"
    cleansed = SafeExceptionReporterFilter().get_safe_settings()
    for name in ("SECRET_KEY", "STRIPE_API_KEY", "STRIPE_WEBHOOK_SECRET", "BMC_CREDENTIALS_KEY", "METRICS_TOKEN"):
        assert cleansed[name] == SafeExceptionReporterFilter.cleansed_substitute, name
    client.raise_request_exception = False
    page = client.get("/boom/", HTTP_ACCEPT="text/html")
    assert page.status_code == 500
    text = page.content.decode(errors="replace")
    # (Local variables do show on this page: production forces DEBUG off, see test_web.py.)
    for value in (settings.BMC_CREDENTIALS_KEY, settings.METRICS_TOKEN, settings.SECRET_KEY):
        assert value not in text


def test_registry_login_never_logged_or_shown(member_factory, token_client_for, image_registry, leaks):
    """A custom image's pull password: registered (right and wrong), listed, replayed with an Idempotency-Key, and
    handed to the node's agent; it shows up only in that agent answer."""
    from hardware.models import AgentCommand
    from inventory.custom_images import pull_auth
    from tests.factories.hardware import agent_node
    from tests.factories.inventory import custom_image

    owner = member_factory(role="owner")
    client = token_client_for(owner)
    image_registry.push("team/trainer", "1.0")
    body = {"name": "trainer", "reference": f"{image_registry.host}/team/trainer:1.0", "username": "puller",
            "password": "right-pass"}
    wrong = client.post("/api/v1/custom-images/", {**body, "password": "wrong-pass-123"}, format="json")
    created = client.post("/api/v1/custom-images/", body, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    replayed = client.post("/api/v1/custom-images/", body, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    listed = client.get("/api/v1/custom-images/")
    assert (wrong.status_code, created.status_code, replayed.status_code) == (400, 201, 201)
    node, token = agent_node(hostname="gpu-secret-01.test")
    image = custom_image(owner.organization, name="other", password="node-only-pass")
    AgentCommand.objects.create(node=node, kind="prepare", deadline="2999-01-01T00:00:00Z",
                                payload={"image": image.reference, "registry_auth": pull_auth(image)})
    leaks("right-pass", "wrong-pass-123", "node-only-pass",
          outputs=[wrong.content, created.content, replayed.content, listed.content])
