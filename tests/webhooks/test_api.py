"""The webhook API: register (secret once), change, rotate, deliveries, resend; owners and admins only."""
import pytest

from webhooks.models import WebhookDelivery, WebhookEndpoint
from webhooks.services import event_publish

pytestmark = pytest.mark.django_db
URL = "/api/v1/webhooks/"
PUBLIC = "https://93.184.216.34/hooks"  # a public literal address: no DNS needed


@pytest.fixture
def owner(member_factory):
    return member_factory(role="owner")


def _create(client, **extra):
    return client.post(URL, {"url": PUBLIC, "event_types": ["instance.running"], **extra}, format="json")


def test_register_shows_the_secret_once_then_never(owner, token_client_for):
    client = token_client_for(owner)
    r = _create(client, description="ci")
    assert r.status_code == 201, r.json()
    body = r.json()
    assert body["secret"].startswith("whsec_") and body["event_types"] == ["instance.running"]
    listed = client.get(URL).json()["results"]
    assert [e["id"] for e in listed] == [body["id"]] and "secret" not in listed[0]
    assert "secret" not in client.get(f"{URL}{body['id']}/").json()
    from tenancy.models import AuditEvent

    assert AuditEvent.objects.filter(action="webhook.create", organization=owner.organization).exists()


@pytest.mark.parametrize("body,field", [
    ({"url": PUBLIC, "event_types": ["instance.exploded"]}, "event_types"),
    ({"url": PUBLIC, "event_types": []}, "event_types"),
    ({"url": "not a url", "event_types": ["instance.running"]}, "url"),
    ({"event_types": ["instance.running"]}, "url"),
])
def test_bad_bodies_are_400_naming_the_field_and_create_nothing(owner, token_client_for, body, field):
    r = token_client_for(owner).post(URL, body, format="json")
    details = r.json()["error"]["details"]
    assert r.status_code == 400 and field in {k.split(".")[0] for k in details}, r.json()
    assert not WebhookEndpoint.objects.exists()


def test_patch_rotate_delete(owner, token_client_for):
    client = token_client_for(owner)
    eid = _create(client).json()["id"]
    r = client.patch(f"{URL}{eid}/", {"event_types": ["balance.low", "instance.failed"], "enabled": False},
                     format="json")
    assert r.status_code == 200 and r.json()["event_types"] == ["balance.low", "instance.failed"]
    assert r.json()["enabled"] is False
    first = client.post(f"{URL}{eid}/rotate-secret/").json()["secret"]
    second = client.post(f"{URL}{eid}/rotate-secret/").json()["secret"]
    assert first != second and first.startswith("whsec_")
    assert WebhookEndpoint.objects.get(pk=eid).secrets.filter(expires_at=None).count() == 1
    assert client.delete(f"{URL}{eid}/").status_code == 204
    assert client.get(f"{URL}{eid}/").status_code == 404
    assert client.get(URL).json()["count"] == 0


def test_deliveries_list_and_resend(owner, token_client_for):
    client = token_client_for(owner)
    eid = _create(client).json()["id"]
    event = event_publish(org_id=owner.organization_id, type="instance.running", dedupe_key="x", data={"a": 1})
    WebhookDelivery.objects.filter(event=event).update(state="failed", attempts=10)
    [row] = client.get(f"{URL}{eid}/deliveries/").json()["results"]
    assert row["event_type"] == "instance.running" and row["state"] == "failed" and row["payload"]["data"] == {"a": 1}
    r = client.post(f"{URL}{eid}/deliveries/{row['id']}/resend/")
    assert r.status_code == 202 and r.json()["state"] == "pending"
    client.patch(f"{URL}{eid}/", {"enabled": False}, format="json")
    r = client.post(f"{URL}{eid}/deliveries/{row['id']}/resend/")
    assert r.status_code == 409 and r.json()["error"]["code"] == "invalid_state"


def test_event_types_are_listed_for_every_role(member_factory, token_client_for):
    r = token_client_for(member_factory(role="viewer")).get(f"{URL}event-types/")
    assert r.status_code == 200 and "instance.running" in {t["type"] for t in r.json()}


@pytest.mark.parametrize("role", ["member", "billing", "viewer"])
def test_only_owners_and_admins_manage_webhooks(role, member_factory, token_client_for, owner):
    eid = _create(token_client_for(owner)).json()["id"]
    other = member_factory(role=role, org=owner.organization)
    client = token_client_for(other)
    assert client.get(URL).status_code == 403
    assert _create(client).status_code == 403
    assert client.delete(f"{URL}{eid}/").status_code == 403
    assert WebhookEndpoint.objects.filter(pk=eid, deleted_at=None).exists()


def test_another_organizations_endpoint_is_404(owner, member_factory, token_client_for):
    eid = _create(token_client_for(owner)).json()["id"]
    stranger = token_client_for(member_factory(role="owner"))
    for method, path in [("get", f"{URL}{eid}/"), ("patch", f"{URL}{eid}/"), ("delete", f"{URL}{eid}/"),
                         ("post", f"{URL}{eid}/rotate-secret/"), ("get", f"{URL}{eid}/deliveries/")]:
        r = getattr(stranger, method)(path, {}, format="json")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", (method, path)
    assert WebhookEndpoint.objects.get(pk=eid).deleted_at is None
