"""Issue 33, bug 11: the admin's times are in the console's zone with the zone shown, and a card's holder is the
instance's name and organization, linked, not a bare uuid."""
import re
from datetime import UTC, datetime

import pytest

from inventory.models import Node
from tests.factories.inventory import CardAllocationFactory, NodeFactory
from tests.factories.provisioning import InstanceFactory
from tests.factories.tenancy import OrganizationFactory

pytestmark = [pytest.mark.pg, pytest.mark.django_db]


def test_admin_times_are_in_the_billing_zone_with_the_zone_shown(operator_client, catalog, settings):
    settings.BILLING_TIME_ZONE = "Asia/Shanghai"
    node = NodeFactory()
    Node.objects.filter(pk=node.pk).update(state_changed_at=datetime(2026, 11, 20, 10, 30, 15, tzinfo=UTC))
    page = operator_client.get("/admin/inventory/node/").content.decode()
    assert "2026-11-20 18:30:15 UTC+0800" in page  # 10:30 UTC, shown as the console shows it: in UTC+8
    assert re.search(r'id="admin-time-zone"[^>]*>Times in UTC\+8 \(Asia/Shanghai\)<', page)
    # The API keeps UTC.
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(operator_client.user)
    assert "+08:00" not in api.get("/api/v1/accelerators/").content.decode()


def test_a_cards_holder_is_the_instance_name_and_organization_linked(operator_client, catalog):
    org = OrganizationFactory(name="Acme Labs")
    inst = InstanceFactory(organization=org, name="train-7", state="running")
    node = NodeFactory()
    CardAllocationFactory(card=node.cards.get(index=0), holder_id=inst.pk)
    link = (f'<a href="/admin/provisioning/instance/{inst.pk}/change/" title="{inst.pk}">train-7</a> · '
            f'<a href="/admin/tenancy/organization/{org.pk}/change/">Acme Labs</a>')
    for url in ("/admin/inventory/card/", "/admin/inventory/cardallocation/", f"/admin/inventory/node/{node.pk}/change/"):
        page = operator_client.get(url).content.decode()
        assert link in page, url
        assert f">{inst.pk}<" not in page, url
