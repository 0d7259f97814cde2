"""SSRF: registration refuses internal targets unless the operator allow-listed them."""
import pytest

from core.errors import ValidationFailed
from webhooks.targets import target_check

INTERNAL = [
    "http://127.0.0.1/x", "http://127.1.2.3:8080/x", "http://localhost/x", "http://[::1]/x",
    "http://10.0.0.5/x", "http://172.16.3.4/x", "http://192.168.1.1/x", "http://169.254.169.254/latest/meta-data",
    "http://[fe80::1]/x", "http://100.64.0.1/x", "http://0.0.0.0/x", "http://[::ffff:127.0.0.1]/x",
    "http://224.0.0.1/x",
]


@pytest.fixture
def production(settings):
    settings.CARDMIX_ENV = "production"
    settings.WEBHOOK_ALLOWED_HOSTS = []
    settings.WEBHOOK_REQUIRE_HTTPS = True
    return settings


@pytest.mark.parametrize("url", INTERNAL)
def test_internal_targets_are_refused(url, production):
    with pytest.raises(ValidationFailed) as exc:
        target_check(url.replace("http://", "https://"))
    assert "url" in exc.value.details


def test_a_name_that_resolves_inside_is_refused(production):
    """DNS names are resolved and every address is checked (a public-looking name may point inside)."""
    def resolve(host, port, type=None):
        return [(2, 1, 6, "", ("10.1.2.3", port)), (2, 1, 6, "", ("93.184.216.34", port))]

    with pytest.raises(ValidationFailed, match="private"):
        target_check("https://hooks.example.org/x", resolve=resolve)


@pytest.mark.parametrize("url,why", [
    ("ftp://93.184.216.34/x", "http"), ("https:///x", "http"), ("https://user:pw@93.184.216.34/x", "credentials"),
    ("http://93.184.216.34/x", "https"), ("https://no-such-host.invalid/x", "resolve"),
])
def test_malformed_or_plain_http_is_refused(url, why, production):
    with pytest.raises(ValidationFailed, match=why):
        target_check(url)


def test_a_public_address_is_accepted(production):
    assert target_check("https://93.184.216.34/hooks") == "https://93.184.216.34/hooks"


def test_the_allow_list_admits_a_loopback_receiver(production):
    production.WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    production.WEBHOOK_REQUIRE_HTTPS = False
    assert target_check("http://127.0.0.1:8123/x") == "http://127.0.0.1:8123/x"
    with pytest.raises(ValidationFailed):
        target_check("http://127.0.0.2:8123/x")  # only the named host


@pytest.mark.django_db
def test_registration_refuses_a_private_target_in_production(production, member_factory, token_client_for):
    client = token_client_for(member_factory(role="owner"))
    r = client.post("/api/v1/webhooks/", {"url": "https://10.0.0.8/hook", "event_types": ["instance.running"]},
                    format="json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "validation_error"
    assert "url" in r.json()["error"]["details"]
    from webhooks.models import WebhookEndpoint

    assert not WebhookEndpoint.objects.exists()
