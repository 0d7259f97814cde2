"""The admin's times are in the console's zone with the zone shown, and a card's holder is the
instance's name and organization, linked, not a bare uuid."""
import re
from datetime import UTC, datetime

import pytest

from inventory.models import Node
from tests.factories.inventory import CardAllocationFactory, NodeFactory
from tests.factories.provisioning import InstanceFactory
from tests.factories.tenancy import OrganizationFactory

pytestmark = pytest.mark.django_db


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


def test_the_admin_index_shows_capacity_per_accelerator_and_zone(operator_client, catalog):
    from inventory.services import cards_set_health, node_set_state
    from tests.factories.provisioning import make_fleet

    east = make_fleet(zone="east", h100=2)
    west = make_fleet(zone="west", h100=1, ascend=1)
    for card in east[0].cards.order_by("index")[:3]:
        CardAllocationFactory(card=card)
    cards_set_health(card_ids=[east[1].cards.get(index=7).pk], health="failed", reason="xid 79", actor=None)
    node_set_state(node=west[0], state="drain", reason="rack move", actor=None)
    page = operator_client.get("/admin/").content.decode()

    def row(acc, zone):
        body = re.search(rf'<tr data-accelerator="{acc}" data-zone="{zone}">(.*?)</tr>', page, re.S).group(1)
        return {k: int(re.sub(r"<[^>]+>", "", v)) for k, v in
                re.findall(r'<td class="(free|allocated|failed|draining|out|total)">(.*?)</td>', body)}

    assert row("h100-sxm-80g", "east") == {"free": 12, "allocated": 3, "failed": 1, "draining": 0, "out": 0,
                                           "total": 16}
    assert row("h100-sxm-80g", "west") == {"free": 0, "allocated": 0, "failed": 0, "draining": 8, "out": 0,
                                           "total": 8}
    assert row("ascend-910b", "west")["free"] == 8
    link = re.search(rf'href="(/admin/inventory/node/\?accelerator__id__exact={east[0].accelerator_id}'
                     rf'&amp;zone__id__exact={east[0].zone_id})"', page)
    listed = operator_client.get(link.group(1).replace("&amp;", "&"))
    assert listed.status_code == 200 and east[0].hostname in listed.content.decode()
    assert west[0].hostname not in listed.content.decode()


def test_staff_without_node_permission_see_no_capacity(client, catalog):
    from tests.factories.tenancy import UserFactory

    client.force_login(UserFactory(is_staff=True))
    page = client.get("/admin/").content.decode()
    assert client.get("/admin/").status_code == 200 and 'id="capacity"' not in page
