"""The operators' instance admin is read-only: state, rates, placement and card holdings belong to the services."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from inventory.models import CardAllocation
from provisioning.models import Instance, InstanceEvent, NodeGroup, ReadinessReport
from tests.factories.inventory import CardAllocationFactory, NodeFactory
from tests.factories.provisioning import InstanceFactory

pytestmark = pytest.mark.django_db


def _running_instance():
    node = NodeFactory()
    card = node.cards.get(index=0)
    instance = InstanceFactory(state="running", price_per_hour=1_900_000)
    CardAllocationFactory(card=card, holder_id=instance.pk)
    NodeGroup.objects.create(instance=instance, item_index=0, accelerator=node.accelerator.slug, node=node,
                             card_indices=[0], card_ids=[str(card.pk)], state="checked", ssh_port=30000,
                             prepare_started_at=timezone.now())
    InstanceEvent.objects.create(instance=instance, from_state="checking", to_state="running", reason="ready",
                                 created_at=timezone.now())
    now = timezone.now()
    ReadinessReport.objects.create(instance=instance, node=node, scope="intra_node", tool="nccl-tests",
                                   started_at=now, finished_at=now, passed=True)
    return instance


def test_instance_admin_cannot_add_edit_or_delete_instances_or_their_rows(operator_client, catalog):
    instance = _running_instance()
    page = operator_client.get(f"/admin/provisioning/instance/{instance.pk}/change/")
    body = page.content.decode()
    assert page.status_code == 200 and "checked" in body and "30000" in body and str(instance.pk) in body
    assert "Created at" in body and "Updated at" in body
    assert 'name="_save"' not in body and "deletelink" not in body
    assert 'name="groups-0-ssh_port"' not in body and 'name="groups-0-prepare_started_at_0"' not in body
    assert 'name="groups-0-driver_seconds"' not in body
    assert 'name="groups-MAX_NUM_FORMS" value="0"' in body and 'name="events-MAX_NUM_FORMS" value="0"' in body
    assert "1.900000" in operator_client.get("/admin/provisioning/instance/").content.decode()  # CNY, not µCNY
    assert '<div class="readonly">1.900000</div>' in body and ">1900000<" not in body  # the page too
    assert "Price per hour (CNY)" in body
    assert operator_client.get("/admin/provisioning/instance/add/").status_code == 403
    # Deleting would leave the card allocated to nothing and the meter charging a deleted instance.
    assert operator_client.post(f"/admin/provisioning/instance/{instance.pk}/delete/", {"post": "yes"}).status_code == 403
    edit = operator_client.post(f"/admin/provisioning/instance/{instance.pk}/change/",
                                {"state": "stopped", "price_per_hour": "1", "groups-TOTAL_FORMS": "1",
                                 "groups-INITIAL_FORMS": "1", "groups-0-id": str(instance.groups.get().pk),
                                 "groups-0-ssh_port": "31000", "groups-0-prepare_started_at_0": ""})
    assert edit.status_code == 403
    instance.refresh_from_db()
    assert (instance.state, instance.price_per_hour) == ("running", 1_900_000)
    assert instance.groups.get().ssh_port == 30000
    assert CardAllocation.objects.filter(holder_id=instance.pk, released_at__isnull=True).count() == 1
    report = ReadinessReport.objects.get(instance=instance)
    assert operator_client.post(f"/admin/provisioning/readinessreport/{report.pk}/delete/",
                                {"post": "yes"}).status_code == 403
    assert operator_client.get("/admin/provisioning/readinessreport/add/").status_code == 403
    assert Instance.objects.filter(pk=instance.pk).exists() and ReadinessReport.objects.filter(pk=report.pk).exists()


def test_readiness_report_list_queries_do_not_grow_with_rows(operator_client, catalog):
    _running_instance()
    with CaptureQueriesContext(connection) as few:
        assert operator_client.get("/admin/provisioning/readinessreport/").status_code == 200
    for _ in range(4):
        _running_instance()
    with CaptureQueriesContext(connection) as many:
        assert operator_client.get("/admin/provisioning/readinessreport/").status_code == 200
    assert len(many) == len(few)
