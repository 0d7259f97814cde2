"""The OpenAPI schema describes the instance, quote, event and readiness bodies exactly (clients type them)."""
from datetime import timedelta

import pytest
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator

from inventory.models import Node
from provisioning.models import ReadinessReport
from tests.factories.provisioning import InstanceFactory, container_body, make_fleet

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def components():
    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


def _props(components, name) -> set:
    return set(components[name]["properties"])


def test_instance_bodies_match_the_schema(components, member_factory, token_client_for, catalog):
    owner = member_factory(role="owner")
    client = token_client_for(owner)
    make_fleet(h100=1)
    inst = InstanceFactory(organization=owner.organization, state="running", ready_at=timezone.now())
    body = client.get(f"/api/v1/instances/{inst.pk}/").json()
    assert set(body) == _props(components, "Instance")
    assert set(body["sla"]) == _props(components, "Sla")
    assert set(body["items"][0]) == _props(components, "InstanceItem")
    listed = client.get("/api/v1/instances/").json()
    assert set(listed) == _props(components, "PaginatedInstance")
    assert set(listed["results"][0]) == _props(components, "Instance")


def test_quote_event_and_readiness_bodies_match_the_schema(components, member_factory, token_client_for, catalog):
    owner = member_factory(role="owner")
    client = token_client_for(owner)
    [node, *_] = make_fleet(h100=1)
    quote = client.post("/api/v1/quotes/", container_body(), format="json").json()
    assert set(quote) == _props(components, "Quote") and set(quote["items"][0]) == _props(components, "QuoteItem")
    inst = InstanceFactory(organization=owner.organization, state="failed")
    from provisioning.services.transitions import event_record

    event_record(instance=inst, from_state="", to_state="pending", reason="create")
    now = timezone.now()
    ReadinessReport.objects.create(instance=inst, node=Node.objects.get(pk=node.pk), scope="intra_node",
                                   tool="nccl-tests", cards=[0, 1], attempt=1, busbw_largest_gbps=240.0,
                                   floor_gbps=235.0, passed=True, errors=[], raw_output="#", started_at=now,
                                   finished_at=now + timedelta(seconds=30))
    events = client.get(f"/api/v1/instances/{inst.pk}/events/").json()["results"]
    assert set(events[0]) == _props(components, "InstanceEvent")
    reports = client.get(f"/api/v1/instances/{inst.pk}/readiness/").json()["results"]
    assert set(reports[0]) == _props(components, "ReadinessReport")
