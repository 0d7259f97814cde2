"""The customer's renewal choice for a monthly instance: API and console, the active package period follows."""
from zoneinfo import ZoneInfo

import pytest
from rest_framework.test import APIClient

from billing.models_products import Package, PackageState
from provisioning.models import Instance
from provisioning.tasks import instance_advance
from tenancy.models import AuditEvent
from tests.factories.billing import fund
from tests.factories.provisioning import InstanceFactory, container_body, make_fleet
from tests.factories.tenancy import login_client

pytestmark = pytest.mark.django_db
URL = "/api/v1/instances/"


def test_renewal_choice_changes_the_instance_and_its_active_period(client, owner):
    fund(owner.organization, 10_000_000_000)
    make_fleet(h100=1)
    created = client.post(URL, container_body("h100-sxm-80g", 1, billing="monthly", package_renewal="stop"),
                          format="json").json()
    assert instance_advance(created["id"]) == "running"
    response = client.post(f"{URL}{created['id']}/package-renewal/", {"package_renewal": "renew"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["package_renewal"] == "renew"
    assert Package.objects.get(instance_id=created["id"], state=PackageState.ACTIVE).renewal == "renew"
    audit = AuditEvent.objects.get(action="instance.package_renewal")
    assert audit.details == {"old": "stop", "new": "renew"} and audit.actor_id == owner.user_id
    # The same choice again changes nothing and records nothing.
    assert client.post(f"{URL}{created['id']}/package-renewal/", {"package_renewal": "renew"},
                       format="json").status_code == 200
    assert AuditEvent.objects.filter(action="instance.package_renewal").count() == 1


def test_refusals(client, owner):
    on_demand = InstanceFactory(organization=owner.organization, state="running")
    refused = client.post(f"{URL}{on_demand.pk}/package-renewal/", {"package_renewal": "renew"}, format="json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "invalid_state"
    monthly = InstanceFactory(organization=owner.organization, state="running", billing="monthly")
    bad = client.post(f"{URL}{monthly.pk}/package-renewal/", {"package_renewal": "forever"}, format="json")
    assert bad.status_code == 400 and "package_renewal" in bad.json()["error"]["details"]
    gone = InstanceFactory(organization=owner.organization, state="terminated", billing="monthly")
    assert client.post(f"{URL}{gone.pk}/package-renewal/", {"package_renewal": "renew"},
                       format="json").status_code == 409
    assert Instance.objects.get(pk=monthly.pk).package_renewal == "stop"


def test_console_shows_the_period_and_changes_the_choice(owner):
    fund(owner.organization, 10_000_000_000)
    make_fleet(h100=1)
    browser = login_client(owner)
    api = login_client(owner, APIClient)
    created = api.post(URL, container_body("h100-sxm-80g", 1, billing="monthly", package_renewal="stop"),
                       format="json").json()
    instance_advance(created["id"])
    package = Package.objects.get(instance_id=created["id"])
    page = browser.get(f"/instances/{created['id']}/").content.decode()
    ends = package.ends_at.astimezone(ZoneInfo("Asia/Shanghai"))  # the console's one time zone, named
    assert f"ends {ends:%Y-%m-%d %H:%M} UTC+8" in page and 'id="package-renewal"' in page
    done = browser.post(f"/instances/{created['id']}/package-renewal/", {"package_renewal": "on_demand"})
    assert done.status_code == 302
    assert Instance.objects.get(pk=created["id"]).package_renewal == "on_demand"
    assert Package.objects.get(pk=package.pk).renewal == "on_demand"
    # Another organization's instance is a 404 here too.
    from tests.factories.tenancy import MembershipFactory

    stranger = login_client(MembershipFactory(role="owner"))
    assert stranger.post(f"/instances/{created['id']}/package-renewal/",
                         {"package_renewal": "renew"}).status_code == 404
