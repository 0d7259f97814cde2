"""The console's Webhooks page: add an endpoint (secret once), see deliveries, resend; owners and admins only."""
import pytest

from webhooks.models import WebhookDelivery, WebhookEndpoint
from webhooks.services import event_publish

pytestmark = pytest.mark.django_db


def test_add_endpoint_then_see_and_resend_a_delivery(member_factory, session_client_for):
    from django.test import Client

    from tests.factories.tenancy import login_client

    owner = member_factory(role="owner")
    client = login_client(owner, Client)
    r = client.post("/webhooks/", {"url": "https://93.184.216.34/h", "event_types": ["instance.running"],
                                   "description": "ci"})
    assert r.status_code == 200 and b"whsec_" in r.content and r["Cache-Control"] == "no-store"
    endpoint = WebhookEndpoint.objects.get(organization=owner.organization)
    assert b"whsec_" not in client.get("/webhooks/").content  # shown once
    event = event_publish(org_id=owner.organization_id, type="instance.running", dedupe_key="c", data={})
    delivery = WebhookDelivery.objects.get(event=event)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(state="failed")
    page = client.get(f"/webhooks/{endpoint.pk}/").content.decode()
    assert "instance.running" in page and event.id in page and "failed" in page
    r = client.post(f"/webhooks/{endpoint.pk}/deliveries/{delivery.pk}/resend/")
    assert r.status_code == 302
    delivery.refresh_from_db()
    assert delivery.state == "pending"
    r = client.post(f"/webhooks/{endpoint.pk}/rotate/")
    assert r.status_code == 302 and b"whsec_" in client.get(f"/webhooks/{endpoint.pk}/").content


def test_bad_url_is_an_error_on_the_form(member_factory):
    from django.test import Client

    from tests.factories.tenancy import login_client

    client = login_client(member_factory(role="admin"), Client)
    r = client.post("/webhooks/", {"url": "https://10.0.0.1/h", "event_types": ["instance.running"]})
    assert r.status_code == 200 and "private" in r.content.decode()
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize("role", ["member", "billing", "viewer"])
def test_other_roles_do_not_see_the_page(role, member_factory):
    from django.test import Client

    from tests.factories.tenancy import login_client

    client = login_client(member_factory(role=role), Client)
    assert client.get("/webhooks/").status_code == 404
    assert b"/webhooks/" not in client.get("/dashboard/").content
