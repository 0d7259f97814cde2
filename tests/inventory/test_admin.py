"""The operators' admin: node actions ask for a reason and are audited, CSV import, read-only cards."""
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from inventory.choices import NodeState
from inventory.models import Node
from tenancy.models import AuditEvent
from tests.factories.inventory import CardAllocationFactory, NodeFactory, ZoneFactory

pytestmark = pytest.mark.django_db


def test_admin_pages_render_without_secrets(operator_client, catalog):
    node = NodeFactory(bmc_credentials_ref="vault:bmc/secret-ref")
    CardAllocationFactory(card=node.cards.get(index=0))
    for url in ("/admin/inventory/node/", "/admin/inventory/node/?state__exact=available&accelerator__id__exact="
                f"{node.accelerator_id}", "/admin/inventory/node/?q=node-", f"/admin/inventory/node/{node.pk}/change/",
                "/admin/inventory/node/add/", "/admin/inventory/card/", "/admin/inventory/cardallocation/",
                f"/admin/inventory/accelerator/{catalog['h100-sxm-80g'].pk}/change/", "/admin/inventory/accelerator/",
                "/admin/inventory/image/", "/admin/inventory/zone/", "/admin/inventory/node/import-csv/"):
        response = operator_client.get(url)
        assert response.status_code == 200, (url, response.status_code)
    changelist = operator_client.get("/admin/inventory/node/").content.decode()
    assert node.hostname in changelist and "Import CSV" in changelist
    assert "vault:bmc" not in changelist and "vault:bmc" not in operator_client.get("/admin/inventory/card/").content.decode()
    accel = operator_client.get("/admin/inventory/accelerator/").content.decode()
    assert "1.900000" in accel and "1.235000" in accel


def test_drain_action_asks_for_a_reason_then_audits(operator_client, catalog):
    nodes = [NodeFactory(), NodeFactory()]
    ids = [str(n.pk) for n in nodes]
    page = operator_client.post("/admin/inventory/node/", {"action": "action_drain", "_selected_action": ids})
    assert page.status_code == 200 and b"give a reason" in page.content
    assert Node.objects.filter(state=NodeState.DRAINING).count() == 0  # nothing happens before the reason
    empty = operator_client.post("/admin/inventory/node/", {"action": "action_drain", "_selected_action": ids,
                                                             "apply": "1", "reason": ""})
    assert empty.status_code == 200 and b"This field is required" in empty.content
    done = operator_client.post("/admin/inventory/node/", {"action": "action_drain", "_selected_action": ids,
                                                            "apply": "1", "reason": "rack move"})
    assert done.status_code == 302
    assert set(Node.objects.filter(pk__in=ids).values_list("state", "state_reason")) == {("draining", "rack move")}
    assert AuditEvent.objects.filter(action="node.draining", actor=operator_client.user).count() == 2
    # Retire is refused for a node with allocated cards and reported, the other one retires.
    CardAllocationFactory(card=nodes[0].cards.get(index=0))
    operator_client.post("/admin/inventory/node/", {"action": "action_retire", "_selected_action": ids,
                                                     "apply": "1", "reason": "eol"})
    assert Node.objects.get(pk=nodes[0].pk).state == NodeState.DRAINING
    assert Node.objects.get(pk=nodes[1].pk).state == NodeState.RETIRED


def test_csv_import_view_all_or_nothing(operator_client, catalog):
    ZoneFactory(slug="zone-x")
    bad = b"hostname,zone,accelerator\nok-1.test,zone-x,h100-sxm-80g\nok-2.test,zone-y,h100-sxm-80g\n"
    response = operator_client.post("/admin/inventory/node/import-csv/",
                                    {"file": SimpleUploadedFile("nodes.csv", bad, content_type="text/csv")})
    assert response.status_code == 200
    assert "row 3: zone" in response.content.decode() and "Unknown zone" in response.content.decode()
    assert not Node.objects.filter(hostname__startswith="ok-").exists()
    good = b"hostname,zone,accelerator,card_count\nok-1.test,zone-x,h100-sxm-80g,8\nok-2.test,zone-x,ascend-910b,4\n"
    response = operator_client.post("/admin/inventory/node/import-csv/",
                                    {"file": SimpleUploadedFile("nodes.csv", good, content_type="text/csv")})
    assert response.status_code == 302
    assert Node.objects.get(hostname="ok-2.test").cards.count() == 4


def test_admin_add_node_creates_cards(operator_client, catalog):
    zone = ZoneFactory()
    response = operator_client.post("/admin/inventory/node/add/", {
        "hostname": "added.test", "zone": zone.pk, "accelerator": catalog["h800-sxm-80g"].pk, "card_count": 8,
        "driver": "simulated", "ssh_host": "", "ssh_port": 22, "bmc_address": "", "bmc_credentials_ref": "",
        "cards-TOTAL_FORMS": 0, "cards-INITIAL_FORMS": 0, "cards-MIN_NUM_FORMS": 0, "cards-MAX_NUM_FORMS": 1000})
    assert response.status_code == 302, response.content.decode()[:3000]
    node = Node.objects.get(hostname="added.test")
    assert node.cards.count() == 8
    assert AuditEvent.objects.filter(action="node.create", target_id=str(node.pk)).exists()


def test_card_health_actions_ask_for_a_reason_then_audit(operator_client, catalog):
    from inventory.models import Card

    node = NodeFactory(card_count=2)
    ids = [str(c.pk) for c in node.cards.all()]
    page = operator_client.post("/admin/inventory/card/", {"action": "action_health_failed", "_selected_action": ids})
    assert page.status_code == 200 and b"give a reason" in page.content and node.hostname.encode() in page.content
    assert not Card.objects.filter(health="failed").exists()
    done = operator_client.post("/admin/inventory/card/", {"action": "action_health_failed", "_selected_action": ids,
                                                            "apply": "1", "reason": "ECC storm"})
    assert done.status_code == 302
    assert set(Card.objects.filter(node=node).values_list("health", flat=True)) == {"failed"}
    assert AuditEvent.objects.filter(action="card.health", actor=operator_client.user).count() == 2
    assert "2 card(s) changed" in operator_client.get("/admin/inventory/card/").content.decode()
    # The node list counts them as failed.
    assert "<b style='color:#b00'>2</b>" in operator_client.get("/admin/inventory/node/").content.decode()


def _accelerator_post(acc, **new_price):
    """The accelerator's change form as the admin posts it, with one new price row (prices-N-…)."""
    existing = list(acc.prices.order_by("-effective_from"))
    data = {"slug": acc.slug, "vendor": acc.vendor, "name": acc.name, "memory_gb": acc.memory_gb, "collective": acc.collective,
            "readiness_floor_gbps": acc.readiness_floor_gbps or "", "orderable": "on" if acc.orderable else "",
            "prices-TOTAL_FORMS": len(existing) + 1, "prices-INITIAL_FORMS": len(existing),
            "prices-MIN_NUM_FORMS": 0, "prices-MAX_NUM_FORMS": 1000}
    if acc.domestic:
        data["domestic"] = "on"
    for i, price in enumerate(existing):
        data[f"prices-{i}-id"], data[f"prices-{i}-accelerator"] = price.pk, acc.pk
    n = len(existing)
    data[f"prices-{n}-accelerator"] = acc.pk
    data.update({f"prices-{n}-{k}": v for k, v in new_price.items()})
    return data


def test_a_new_price_in_the_admin_is_validated_and_audited_like_price_create(operator_client, catalog):
    """Prices are shown and typed in CNY (before: raw µCNY, "2000000" for 2 CNY); junk is a form error, not a 500."""
    from datetime import timedelta

    from django.utils import timezone

    from inventory.models import Price

    acc = catalog["h100-sxm-80g"]
    url = f"/admin/inventory/accelerator/{acc.pk}/change/"
    page = operator_client.get(url).content.decode()
    assert "1.900000" in page and ">1900000<" not in page and "1900000 µCNY" not in page  # the existing row
    before = acc.prices.count()
    past = timezone.localtime() - timedelta(days=3)
    for bad, error in (({"on_demand_per_card_hour_cny": "2", "monthly_per_card_hour_cny": "-5"},
                        "Must be a positive amount"),
                       ({"on_demand_per_card_hour_cny": "2", "monthly_per_card_hour_cny": "0"},
                        "Must be a positive amount"),
                       ({"on_demand_per_card_hour_cny": "0"}, "Must be a positive amount"),
                       ({"on_demand_per_card_hour_cny": "2", "effective_from_0": past.strftime("%Y-%m-%d"),
                         "effective_from_1": past.strftime("%H:%M:%S")}, "A price cannot start in the past"),
                       ({"on_demand_per_card_hour_cny": "abc"}, "Not a decimal amount"),
                       ({"on_demand_per_card_hour_cny": "NaN"}, "Not a finite amount"),
                       ({"on_demand_per_card_hour_cny": "2.0000001"}, "At most 6 decimal places"),
                       ({"on_demand_per_card_hour_cny": "1e999999"}, "too large")):
        fields = {"effective_from_0": (timezone.localtime() + timedelta(days=1)).strftime("%Y-%m-%d"),
                  "effective_from_1": "00:00:00", **bad}
        response = operator_client.post(url, _accelerator_post(acc, **fields))
        assert response.status_code == 200, bad  # the form again, with the error
        assert error in response.content.decode(), bad
    assert acc.prices.count() == before
    tomorrow = timezone.localtime() + timedelta(days=1)
    response = operator_client.post(url, _accelerator_post(acc, on_demand_per_card_hour_cny="2.1",
                                                           effective_from_0=tomorrow.strftime("%Y-%m-%d"),
                                                           effective_from_1="08:00:00"))
    assert response.status_code == 302, response.content.decode()[-3000:]
    price = Price.objects.get(accelerator=acc, on_demand_per_card_hour=2_100_000)
    assert price.monthly_per_card_hour is None
    assert AuditEvent.objects.filter(action="price.create", target_id=str(price.pk), actor=operator_client.user).exists()
    response = operator_client.post(url, _accelerator_post(acc, on_demand_per_card_hour_cny="2.000001",
                                                           monthly_per_card_hour_cny="1.300001",
                                                           effective_from_0=tomorrow.strftime("%Y-%m-%d"),
                                                           effective_from_1="09:00:00"))
    assert response.status_code == 302, response.content.decode()[-3000:]
    assert Price.objects.filter(accelerator=acc, on_demand_per_card_hour=2_000_001,
                                monthly_per_card_hour=1_300_001).exists()


def test_accelerator_and_image_slugs_that_instances_name_stay_fixed_and_image_edits_are_audited(operator_client,
                                                                                                 catalog):
    from inventory.models import Accelerator, Image

    acc = catalog["h100-sxm-80g"]
    data = _accelerator_post(acc)
    data.update({"slug": "h100-renamed", "vendor": "huawei", "name": "H100 (renamed)", "prices-TOTAL_FORMS":
                 data["prices-INITIAL_FORMS"]})
    response = operator_client.post(f"/admin/inventory/accelerator/{acc.pk}/change/", data)
    assert response.status_code == 302
    assert Accelerator.objects.filter(pk=acc.pk).values_list("slug", "vendor", "name").get() == (
        "h100-sxm-80g", "nvidia", "H100 (renamed)")
    image = Image.objects.get(slug="pytorch-2.3-cuda12.3")
    response = operator_client.post(f"/admin/inventory/image/{image.pk}/change/", {
        "slug": "pytorch-renamed", "name": image.name, "description": "new words", "vendors": '["nvidia"]',
        "active": "on"})
    assert response.status_code == 302
    image.refresh_from_db()
    assert (image.slug, image.description) == ("pytorch-2.3-cuda12.3", "new words")
    assert AuditEvent.objects.filter(action="image.update", target_id=str(image.pk), actor=operator_client.user).exists()
    assert operator_client.post(f"/admin/inventory/image/{image.pk}/delete/", {"post": "yes"}).status_code == 403
    response = operator_client.post("/admin/inventory/image/add/", {"slug": "new-image-1.0", "name": "New",
                                                                    "vendors": '["nvidia"]', "active": "on"})
    assert response.status_code == 302
    assert AuditEvent.objects.filter(action="image.create", actor=operator_client.user).exists()


def test_nodes_are_retired_not_deleted_and_unused_zones_and_accelerators_delete_audited(operator_client, catalog):
    """Before: a never-used node was deleted with its cards, agent credential and commands, unaudited; zone and
    accelerator deletes wrote no audit."""
    from inventory.models import Accelerator, Zone
    from tests.factories.inventory import AcceleratorFactory

    node = NodeFactory()
    assert operator_client.post(f"/admin/inventory/node/{node.pk}/delete/", {"post": "yes"}).status_code == 403
    operator_client.post("/admin/inventory/node/", {"action": "delete_selected", "_selected_action": [str(node.pk)],
                                                    "post": "yes"})
    assert Node.objects.filter(pk=node.pk).exists() and node.cards.count() == node.card_count
    # A zone or accelerator that a node (or a price) names stays; unused ones go, audited.
    assert operator_client.post(f"/admin/inventory/zone/{node.zone_id}/delete/", {"post": "yes"}).status_code != 302
    assert operator_client.post(f"/admin/inventory/accelerator/{node.accelerator_id}/delete/",
                                {"post": "yes"}).status_code != 302
    assert Zone.objects.filter(pk=node.zone_id).exists() and Accelerator.objects.filter(pk=node.accelerator_id).exists()
    zone, spare = ZoneFactory(slug="zone-unused"), ZoneFactory(slug="zone-unused-2")
    acc = AcceleratorFactory(slug="typo-accel")
    assert operator_client.post(f"/admin/inventory/zone/{zone.pk}/delete/", {"post": "yes"}).status_code == 302
    assert operator_client.post("/admin/inventory/zone/", {"action": "delete_selected", "post": "yes",
                                                           "_selected_action": [str(spare.pk)]}).status_code == 302
    assert operator_client.post(f"/admin/inventory/accelerator/{acc.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not Zone.objects.filter(slug__startswith="zone-unused").exists()
    events = AuditEvent.objects.filter(actor=operator_client.user, action__in=["zone.delete", "accelerator.delete"])
    assert sorted(events.values_list("action", "target_id")) == sorted([
        ("accelerator.delete", str(acc.pk)), ("zone.delete", str(zone.pk)), ("zone.delete", str(spare.pk))])


def test_a_view_only_operator_cannot_change_nodes_or_cards_through_the_actions(catalog):
    """Django offers an action without allowed_permissions to anyone who can open the list: before, staff who
    could only view nodes and cards drained or retired nodes and marked cards failed (a reason was all it took)."""
    from django.contrib.auth.models import Permission
    from django.test import Client

    from inventory.models import Card
    from tests.factories.tenancy import UserFactory

    node = NodeFactory()
    card = node.cards.get(index=0)
    viewer = UserFactory(is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(content_type__app_label="inventory",
                                                          codename__in=["view_node", "view_card"]))
    client = Client()
    client.force_login(viewer)
    assert client.get("/admin/inventory/node/").status_code == 200
    client.post("/admin/inventory/node/", {"action": "action_retire", "_selected_action": [str(node.pk)],
                                           "apply": "1", "reason": "x"})
    client.post("/admin/inventory/card/", {"action": "action_health_failed", "_selected_action": [str(card.pk)],
                                           "apply": "1", "reason": "x"})
    assert Node.objects.get(pk=node.pk).state == NodeState.AVAILABLE
    assert Card.objects.get(pk=card.pk).health == "ok"
    assert not AuditEvent.objects.filter(actor=viewer).exists()


def test_zone_slugs_stay_fixed_and_zone_creates_and_edits_are_audited(operator_client, catalog):
    """Before: a zone's slug could be renamed (nodes, instances' zone pin, waitlisted shapes and placement name it)
    and creating or editing a zone (its fabric and inter-node floor) wrote no audit."""
    from inventory.models import Zone

    form = {"name": "Shanghai 9", "fabric_kind": "roce", "fabric_gbps": 400, "inter_node_floor_gbps": "25.50",
            "cluster_network": "vxlan"}
    response = operator_client.post("/admin/inventory/zone/add/", {"slug": "cn-sh-9", **form})
    assert response.status_code == 302, response.content.decode()[-2000:]
    zone = Zone.objects.get(slug="cn-sh-9")
    created = AuditEvent.objects.get(action="zone.create", target_id=str(zone.pk))
    assert created.actor == operator_client.user and created.details["slug"] == "cn-sh-9"
    node = NodeFactory(zone=zone)
    response = operator_client.post(f"/admin/inventory/zone/{zone.pk}/change/",
                                    {**form, "slug": "cn-sh-renamed", "inter_node_floor_gbps": "30.00"})
    assert response.status_code == 302
    zone.refresh_from_db()
    assert (zone.slug, str(zone.inter_node_floor_gbps)) == ("cn-sh-9", "30.00")
    assert Node.objects.get(pk=node.pk).zone.slug == "cn-sh-9"
    updated = AuditEvent.objects.get(action="zone.update", target_id=str(zone.pk))
    assert updated.actor == operator_client.user
    assert updated.details["fields"] == {"inter_node_floor_gbps": {"old": "25.50", "new": "30.00"}}
    # Saving it unchanged audits nothing.
    assert operator_client.post(f"/admin/inventory/zone/{zone.pk}/change/",
                                {**form, "inter_node_floor_gbps": "30.00"}).status_code == 302
    assert AuditEvent.objects.filter(action="zone.update").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_zone_slug_taken_after_the_form_checked_it_is_a_form_error_and_saves_nothing(operator_client, monkeypatch):
    """zone_save refuses a slug another zone took between the form's validation and its save. Before: a 500."""
    from inventory.admin import ZoneAdmin
    from inventory.models import Zone
    from tests.races import meanwhile

    meanwhile(monkeypatch, ZoneAdmin, "save_model", lambda: Zone.objects.create(
        slug="cn-sh-9", name="Theirs", fabric_kind="infiniband", fabric_gbps=200, inter_node_floor_gbps="10"))
    response = operator_client.post("/admin/inventory/zone/add/", {
        "slug": "cn-sh-9", "name": "Shanghai 9", "fabric_kind": "roce", "fabric_gbps": 400,
        "inter_node_floor_gbps": "25.50", "cluster_network": "vxlan"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "A zone with this slug exists." in page and "The zone is invalid." in page and 'value="Shanghai 9"' in page
    assert list(Zone.objects.filter(slug="cn-sh-9").values_list("name", flat=True)) == ["Theirs"]
    assert not AuditEvent.objects.filter(action="zone.create").exists()


@pytest.mark.django_db(transaction=True)
def test_a_price_start_taken_after_the_form_checked_it_is_a_form_error_and_saves_nothing(operator_client, catalog,
                                                                                          monkeypatch):
    """price_create refuses a start another price of the accelerator took between the form's validation and its
    save; the accelerator's own edit is not saved either. Before: a 500."""
    from datetime import timedelta
    from zoneinfo import ZoneInfo

    from django.conf import settings
    from django.utils import timezone

    from inventory.admin import AcceleratorAdmin
    from inventory.models import Accelerator, Price
    from tests.races import meanwhile

    acc = catalog["h100-sxm-80g"]
    # The admin reads typed times in the billing time zone (as it shows them).
    zone = ZoneInfo(settings.BILLING_TIME_ZONE)
    start = (timezone.localtime(timezone=zone) + timedelta(days=1)).replace(hour=8, minute=0, second=0, microsecond=0)
    before = set(acc.prices.values_list("pk", flat=True))
    meanwhile(monkeypatch, AcceleratorAdmin, "save_model", lambda: Price.objects.create(
        accelerator_id=acc.pk, on_demand_per_card_hour=3_000_000, effective_from=start))
    data = _accelerator_post(acc, on_demand_per_card_hour_cny="2.1", effective_from_0=start.strftime("%Y-%m-%d"),
                             effective_from_1="08:00:00")
    response = operator_client.post(f"/admin/inventory/accelerator/{acc.pk}/change/", {**data, "name": "Renamed"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "A price already starts at this time." in page and "The price is invalid." in page
    assert list(Price.objects.filter(accelerator=acc).exclude(pk__in=before)
                .values_list("on_demand_per_card_hour", flat=True)) == [3_000_000]
    assert Accelerator.objects.get(pk=acc.pk).name == acc.name
    assert not AuditEvent.objects.filter(action="price.create").exists()


@pytest.mark.django_db(transaction=True)
def test_a_node_hostname_or_image_slug_taken_after_the_form_checked_it_is_a_form_error(operator_client, catalog,
                                                                                        monkeypatch):
    """node_create and image_save refuse what another write took meanwhile; the admin shows it. Before: a 500."""
    from inventory.admin import ImageAdmin, NodeAdmin
    from inventory.models import Image
    from tests.races import meanwhile

    zone = ZoneFactory()
    meanwhile(monkeypatch, NodeAdmin, "save_model", lambda: NodeFactory(hostname="added.test", zone=zone))
    response = operator_client.post("/admin/inventory/node/add/", {
        "hostname": "added.test", "zone": zone.pk, "accelerator": catalog["h800-sxm-80g"].pk, "card_count": 8,
        "driver": "simulated", "ssh_host": "", "ssh_port": 22, "bmc_address": "", "bmc_credentials_ref": "",
        "cards-TOTAL_FORMS": 0, "cards-INITIAL_FORMS": 0, "cards-MIN_NUM_FORMS": 0, "cards-MAX_NUM_FORMS": 1000})
    assert response.status_code == 200 and "The node is invalid." in response.content.decode()
    assert Node.objects.filter(hostname="added.test").count() == 1
    meanwhile(monkeypatch, ImageAdmin, "save_model",
              lambda: Image.objects.create(slug="new-image-1.0", name="Theirs", vendors=["nvidia"]))
    response = operator_client.post("/admin/inventory/image/add/", {"slug": "new-image-1.0", "name": "New",
                                                                    "vendors": '["nvidia"]', "active": "on"})
    assert response.status_code == 200 and "An image with this slug exists." in response.content.decode()
    assert list(Image.objects.filter(slug="new-image-1.0").values_list("name", flat=True)) == ["Theirs"]
    assert not AuditEvent.objects.filter(action__in=["node.create", "image.create"], actor=operator_client.user).exists()


def test_accelerator_creates_and_edits_in_the_admin_are_audited(operator_client, catalog):
    """Before: editing an accelerator (its readiness floor, whether it is orderable, its name) and creating one
    wrote no audit event; only its prices and its delete did."""
    from inventory.models import Accelerator

    response = operator_client.post("/admin/inventory/accelerator/add/", {
        "slug": "mi300x", "name": "MI300X", "vendor": "nvidia", "memory_gb": 192, "collective": "nccl",
        "readiness_floor_gbps": "300.00", "orderable": "", "prices-TOTAL_FORMS": 0, "prices-INITIAL_FORMS": 0,
        "prices-MIN_NUM_FORMS": 0, "prices-MAX_NUM_FORMS": 1000})
    assert response.status_code == 302, response.content.decode()[-3000:]
    acc = Accelerator.objects.get(slug="mi300x")
    created = AuditEvent.objects.get(action="accelerator.create", target_id=str(acc.pk))
    assert created.actor == operator_client.user
    assert created.details["slug"] == "mi300x" and created.details["readiness_floor_gbps"] == "300.00"
    assert created.details["orderable"] is False

    h100 = catalog["h100-sxm-80g"]
    data = _accelerator_post(h100)
    data.update({"readiness_floor_gbps": "320.50", "orderable": "", "prices-TOTAL_FORMS": data["prices-INITIAL_FORMS"]})
    response = operator_client.post(f"/admin/inventory/accelerator/{h100.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    h100.refresh_from_db()
    assert (str(h100.readiness_floor_gbps), h100.orderable) == ("320.50", False)
    updated = AuditEvent.objects.get(action="accelerator.update", target_id=str(h100.pk))
    assert updated.actor == operator_client.user
    assert updated.details["slug"] == "h100-sxm-80g"
    assert set(updated.details["fields"]) == {"readiness_floor_gbps", "orderable"}
    assert updated.details["fields"]["orderable"] == {"old": True, "new": False}
    assert updated.details["fields"]["readiness_floor_gbps"]["new"] == "320.50"
    # Saving it unchanged audits nothing more.
    data = _accelerator_post(h100)
    data["prices-TOTAL_FORMS"] = data["prices-INITIAL_FORMS"]
    assert operator_client.post(f"/admin/inventory/accelerator/{h100.pk}/change/", data).status_code == 302
    assert AuditEvent.objects.filter(action="accelerator.update").count() == 1
