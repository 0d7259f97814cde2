"""The catalog API (every role) and the staff admin API: fields, permissions, errors, query counts."""
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from inventory.choices import CardHealth, NodeState
from inventory.models import Accelerator, Card, Image, Node, Price
from tenancy.models import AuditEvent
from tests.factories.inventory import CardAllocationFactory, NodeFactory, ZoneFactory, accelerator

pytestmark = pytest.mark.django_db

ROLES = ["owner", "admin", "member", "billing", "viewer"]


def assert_error(response, status, code):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"]["code"] == code
    return body["error"]


def _fleet(per_accelerator: int, zone):
    """`per_accelerator` nodes of every accelerator, each with an allocation and a failed card."""
    for acc in Accelerator.objects.all():
        for _ in range(per_accelerator):
            node = NodeFactory(zone=zone, accelerator=acc, card_count=2)
            cards = list(node.cards.order_by("index"))
            CardAllocationFactory(card=cards[0])
            Card.objects.filter(pk=cards[1].pk).update(health=CardHealth.FAILED)


def _count(client, url):
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200, response.content
    return len(ctx.captured_queries), response.json()


@pytest.mark.parametrize("role", ROLES)
def test_every_role_reads_the_catalog(role, member_factory, session_client_for, catalog):
    client = session_client_for(member_factory(role=role))
    body = client.get("/api/v1/accelerators/").json()
    assert body["count"] == 6
    assert client.get("/api/v1/images/").json()["count"] == 5


def test_catalog_needs_login(api_client):
    assert_error(api_client.get("/api/v1/accelerators/"), 401, "not_authenticated")
    assert_error(api_client.get("/api/v1/admin-api/nodes/"), 401, "not_authenticated")


def test_accelerator_fields_prices_and_stock(member_factory, session_client_for, catalog):
    zone = ZoneFactory()
    node = NodeFactory(zone=zone, accelerator=catalog["h100-sxm-80g"])
    CardAllocationFactory(card=node.cards.get(index=0))
    NodeFactory(zone=zone, accelerator=catalog["h100-sxm-80g"], state=NodeState.DRAINING)
    client = session_client_for(member_factory(role="viewer"))
    rows = {r["slug"]: r for r in client.get("/api/v1/accelerators/").json()["results"]}
    assert rows["h100-sxm-80g"] == {
        "slug": "h100-sxm-80g", "name": "NVIDIA H100 SXM 80GB", "vendor": "nvidia", "domestic": False,
        "memory_gb": 80, "collective": "nccl", "price_per_card_hour": "1.900000",
        "monthly_price_per_card_hour": "1.235000", "orderable": True, "available_cards": 7, "total_cards": 16}
    assert rows["h800-sxm-80g"]["monthly_price_per_card_hour"] == "4.420000"
    assert rows["ascend-910b"]["domestic"] is True and rows["ascend-910b"]["collective"] == "hccl"
    assert rows["mtt-s4000"]["price_per_card_hour"] is None and rows["mtt-s4000"]["orderable"] is False
    assert rows["mtt-s4000"]["total_cards"] == 0
    one = client.get("/api/v1/accelerators/ascend-910b/").json()
    assert one["price_per_card_hour"] == "2.400000"
    image = client.get("/api/v1/images/cann-torch-npu/").json()
    assert image == {"slug": "cann-torch-npu", "name": image["name"], "description": image["description"],
                     "vendors": ["huawei"], "jupyter_port": 8888,
                     "http_ports": [{"name": "JupyterLab", "port": 8888}, {"name": "TensorBoard", "port": 6006}]}
    assert [i["slug"] for i in client.get("/api/v1/images/?vendor=huawei").json()["results"]] == ["cann-torch-npu"]
    assert client.get("/api/v1/images/cann-torch-npu/?vendor=nvidia").json()["slug"] == "cann-torch-npu"
    assert_error(client.get("/api/v1/accelerators/nope/"), 404, "not_found")


def test_catalog_and_node_list_queries_do_not_grow(member_factory, session_client_for, staff_client, catalog):
    zone = ZoneFactory()
    viewer = session_client_for(member_factory(role="viewer"))
    _fleet(2, zone)
    few_acc, body = _count(viewer, "/api/v1/accelerators/")
    assert body["results"][0]["total_cards"] == 4
    few_nodes, body = _count(staff_client, "/api/v1/admin-api/nodes/?limit=500")
    assert body["count"] == 12
    few_cards, _ = _count(staff_client, "/api/v1/admin-api/cards/?limit=500")
    _fleet(48, zone)
    many_acc, body = _count(viewer, "/api/v1/accelerators/")
    assert {r["total_cards"] for r in body["results"]} == {100}
    assert {r["available_cards"] for r in body["results"]} == {0}
    many_nodes, body = _count(staff_client, "/api/v1/admin-api/nodes/?limit=500")
    assert body["count"] == 300 and len(body["results"]) == 300
    assert {(r["cards_allocated"], r["cards_failed"], r["cards_free"]) for r in body["results"]} == {(1, 1, 0)}
    assert {r["zone"] for r in body["results"]} == {zone.slug}
    many_cards, body = _count(staff_client, "/api/v1/admin-api/cards/?limit=500")
    assert len(body["results"]) == 500
    print(f"QUERIES accelerators={few_acc}/{many_acc} nodes={few_nodes}/{many_nodes} cards={few_cards}/{many_cards}")
    assert few_acc == many_acc and few_nodes == many_nodes and few_cards == many_cards


@pytest.mark.parametrize("role", ROLES)
def test_admin_api_refuses_non_staff(role, member_factory, session_client_for, catalog):
    node = NodeFactory()
    client = session_client_for(member_factory(role=role))
    for url in ("/api/v1/admin-api/nodes/", f"/api/v1/admin-api/nodes/{node.pk}/", "/api/v1/admin-api/cards/",
                "/api/v1/admin-api/prices/", "/api/v1/admin-api/images/"):
        assert_error(client.get(url), 403, "permission_denied")
    assert_error(client.post(f"/api/v1/admin-api/nodes/{node.pk}/drain/", {"reason": "x"}, format="json"),
                 403, "permission_denied")
    assert_error(client.post("/api/v1/admin-api/nodes/", {}, format="json"), 403, "permission_denied")
    card = node.cards.get(index=0)
    assert_error(client.post(f"/api/v1/admin-api/cards/{card.pk}/health/", {"health": "failed", "reason": "x"},
                             format="json"), 403, "permission_denied")
    assert Node.objects.get(pk=node.pk).state == NodeState.AVAILABLE
    assert node.cards.get(index=0).health == "ok"


def test_an_operators_read_token_only_reads_the_admin_api(member_factory, token_client_for, catalog):
    node = NodeFactory()
    membership = member_factory(role="owner")
    membership.user.is_staff = True
    membership.user.save(update_fields=["is_staff"])
    reader, writer = token_client_for(membership, scope="read"), token_client_for(membership, scope="write")
    assert reader.get("/api/v1/admin-api/nodes/").status_code == 200
    assert reader.get(f"/api/v1/admin-api/nodes/{node.pk}/").status_code == 200
    assert_error(reader.post(f"/api/v1/admin-api/nodes/{node.pk}/drain/", {"reason": "x"}, format="json"),
                 403, "permission_denied")
    assert_error(reader.patch(f"/api/v1/admin-api/nodes/{node.pk}/", {"ssh_port": 2222}, format="json"),
                 403, "permission_denied")
    assert_error(reader.post("/api/v1/admin-api/images/", {"slug": "evil", "name": "evil", "vendors": ["nvidia"],
                                                            "description": "x"}, format="json"),
                 403, "permission_denied")
    assert_error(reader.post(f"/api/v1/admin-api/cards/{node.cards.get(index=0).pk}/health/",
                             {"health": "failed", "reason": "x"}, format="json"), 403, "permission_denied")
    assert Node.objects.get(pk=node.pk).state == NodeState.AVAILABLE and node.cards.get(index=0).health == "ok"
    assert writer.post(f"/api/v1/admin-api/nodes/{node.pk}/drain/", {"reason": "x"}, format="json").status_code == 200


def test_admin_api_node_crud_filters_and_actions(staff_client, catalog):
    from tests.factories.hardware import bmc_credential

    zone = ZoneFactory(slug="cn-test-1")
    bmc_credential(name="bmc-api-01")  # the ref must name an existing BMC credential
    bad = {"hostname": "API-00.test", "zone": "cn-test-1", "accelerator": "ascend-910b",
           "bmc_address": "https://10.0.0.4", "bmc_credentials_ref": "vault:bmc/api-00"}
    refused = staff_client.post("/api/v1/admin-api/nodes/", bad, format="json", HTTP_IDEMPOTENCY_KEY="n0")
    assert refused.status_code == 400 and list(refused.json()["error"]["details"]) == ["bmc_credentials_ref"]
    body = {"hostname": "API-01.test", "zone": "cn-test-1", "accelerator": "ascend-910b", "card_count": 8,
            "bmc_address": "https://10.0.0.5", "bmc_credentials_ref": "bmc-api-01"}
    created = staff_client.post("/api/v1/admin-api/nodes/", body, format="json", HTTP_IDEMPOTENCY_KEY="n1")
    assert created.status_code == 201, created.content
    node = created.json()
    assert node["hostname"] == "api-01.test" and node["cards_free"] == 8 and node["has_bmc_credentials"] is True
    assert "bmc_credentials_ref" not in node and "bmc-api-01" not in created.content.decode()
    replay = staff_client.post("/api/v1/admin-api/nodes/", body, format="json", HTTP_IDEMPOTENCY_KEY="n1")
    assert replay.json()["id"] == node["id"] and Node.objects.filter(hostname="api-01.test").count() == 1
    NodeFactory(zone=zone, accelerator=catalog["h100-sxm-80g"], hostname="other.test", driver="redfish")

    url = f"/api/v1/admin-api/nodes/{node['id']}/"
    drained = staff_client.post(url + "drain/", {"reason": "bad fan"}, format="json")
    assert drained.status_code == 200 and drained.json()["state"] == "draining"
    assert drained.json()["state_reason"] == "bad fan"
    assert AuditEvent.objects.filter(action="node.draining", target_id=node["id"],
                                     actor=staff_client.user).exists()
    listing = staff_client.get("/api/v1/admin-api/nodes/?state=draining").json()
    assert [n["hostname"] for n in listing["results"]] == ["api-01.test"]
    assert staff_client.get("/api/v1/admin-api/nodes/?accelerator=h100-sxm-80g").json()["count"] == 1
    assert staff_client.get("/api/v1/admin-api/nodes/?driver=redfish&zone=cn-test-1").json()["count"] == 1
    assert staff_client.get("/api/v1/admin-api/nodes/?q=api-0").json()["count"] == 1
    for verb, state in (("undrain", "available"), ("maintenance", "maintenance"), ("quarantine", "quarantined")):
        assert staff_client.post(url + f"{verb}/", {"reason": verb}, format="json").json()["state"] == state

    patched = staff_client.patch(url, {"ssh_port": 2222, "driver": "agent"}, format="json")
    assert patched.status_code == 200 and (patched.json()["ssh_port"], patched.json()["driver"]) == (2222, "agent")
    assert_error(staff_client.get(f"/api/v1/admin-api/nodes/{uuid.uuid4()}/"), 404, "not_found")

    CardAllocationFactory(card=Card.objects.get(node_id=node["id"], index=0))
    assert_error(staff_client.post(url + "retire/", {"reason": "old"}, format="json"), 409, "invalid_state")
    cards = staff_client.get(f"/api/v1/admin-api/cards/?node={node['id']}&allocated=true").json()
    assert cards["count"] == 1 and cards["results"][0]["holder"]["kind"] == "instance"
    assert cards["results"][0]["accelerator"] == "ascend-910b"


def test_admin_api_bad_input_is_validation_error(staff_client, catalog):
    node = NodeFactory()
    ZoneFactory(slug="z-ok")
    err = assert_error(staff_client.post("/api/v1/admin-api/nodes/", {"hostname": "x..bad", "zone": "nope",
                                                                       "accelerator": "h100-sxm-80g",
                                                                       "card_count": 0}, format="json"),
                       400, "validation_error")
    assert set(err["details"]) == {"zone", "card_count"}
    err = assert_error(staff_client.post("/api/v1/admin-api/nodes/", {"hostname": "x..bad", "zone": "z-ok",
                                                                       "accelerator": "h100-sxm-80g"}, format="json"),
                       400, "validation_error")
    assert set(err["details"]) == {"hostname"}
    err = assert_error(staff_client.post("/api/v1/admin-api/nodes/", {"hostname": node.hostname, "zone": "z-ok",
                                                                       "accelerator": "h100-sxm-80g"}, format="json"),
                       400, "validation_error")
    assert "exists" in err["details"]["hostname"][0]
    err = assert_error(staff_client.post(f"/api/v1/admin-api/nodes/{node.pk}/drain/", {}, format="json"),
                       400, "validation_error")
    assert "reason" in err["details"]
    err = assert_error(staff_client.patch(f"/api/v1/admin-api/nodes/{node.pk}/", {"state": "available",
                                                                                    "ssh_port": 0}, format="json"),
                       400, "validation_error")
    assert set(err["details"]) >= {"ssh_port"}
    err = assert_error(staff_client.patch(f"/api/v1/admin-api/nodes/{node.pk}/", {"card_count": 4}, format="json"),
                       400, "validation_error")
    assert "card_count" in err["details"]
    assert_error(staff_client.post("/api/v1/admin-api/nodes/", "not json", content_type="application/json"),
                 400, "validation_error")
    err = assert_error(staff_client.post("/api/v1/admin-api/prices/", {"accelerator": "h800-sxm-80g",
                                                                        "price_per_card_hour": "1.2345678"},
                                         format="json"), 400, "validation_error")
    assert "price_per_card_hour" in err["details"]
    err = assert_error(staff_client.post("/api/v1/admin-api/images/", {"slug": "x", "name": "x",
                                                                        "vendors": ["amd"]}, format="json"),
                       400, "validation_error")
    assert err["details"] == {"vendors.0": ['"amd" is not a valid choice.']}  # the element, by its path


def test_admin_api_prices_and_images(staff_client, catalog, member_factory, session_client_for):
    response = staff_client.post("/api/v1/admin-api/prices/", {"accelerator": "a800-sxm-80g",
                                                                "price_per_card_hour": "2.100000",
                                                                "monthly_price_per_card_hour": None},
                                 format="json", HTTP_IDEMPOTENCY_KEY="p1")
    assert response.status_code == 201, response.content
    assert response.json()["price_per_card_hour"] == "2.100000"
    assert Price.objects.filter(accelerator__slug="a800-sxm-80g").count() == 2
    viewer = session_client_for(member_factory(role="viewer"))
    a800 = viewer.get("/api/v1/accelerators/a800-sxm-80g/").json()
    assert (a800["price_per_card_hour"], a800["monthly_price_per_card_hour"]) == ("2.100000", "1.365000")
    history = staff_client.get("/api/v1/admin-api/prices/?accelerator__slug=a800-sxm-80g").json()
    assert [p["price_per_card_hour"] for p in history["results"]] == ["2.100000", "2.000000"]

    made = staff_client.post("/api/v1/admin-api/images/", {"slug": "vllm", "name": "vLLM", "vendors": ["nvidia"]},
                             format="json")
    assert made.status_code == 201, made.content
    off = staff_client.patch(f"/api/v1/admin-api/images/{made.json()['id']}/", {"active": False}, format="json")
    assert off.status_code == 200 and off.json()["active"] is False
    assert "vllm" not in [i["slug"] for i in viewer.get("/api/v1/images/").json()["results"]]
    assert Image.objects.filter(slug="vllm").exists()
    assert AuditEvent.objects.filter(action__in=["price.create", "image.create", "image.update"]).count() == 3
    assert accelerator("a800-sxm-80g").orderable


@pytest.mark.parametrize("role", ROLES)
def test_bearer_tokens_read_the_catalog_but_not_the_admin_api(role, member_factory, token_client_for, catalog):
    client = token_client_for(member_factory(role=role), scope="read")
    rows = client.get("/api/v1/accelerators/").json()["results"]
    assert {r["slug"] for r in rows} == set(catalog)
    assert client.get("/api/v1/images/").status_code == 200
    assert_error(client.get("/api/v1/admin-api/nodes/"), 403, "permission_denied")


def test_staff_bearer_token_reaches_the_admin_api(member_factory, token_client_for, catalog):
    membership = member_factory(role="owner")
    membership.user.is_staff = True
    membership.user.save(update_fields=["is_staff"])
    NodeFactory()
    client = token_client_for(membership, scope="write")
    assert client.get("/api/v1/admin-api/nodes/").json()["count"] == 1


def test_admin_api_card_health(staff_client, catalog):
    node = NodeFactory()
    card = node.cards.get(index=3)
    url = f"/api/v1/admin-api/cards/{card.pk}/health/"
    marked = staff_client.post(url, {"health": "failed", "reason": "XID 48 double-bit ECC"}, format="json")
    assert marked.status_code == 200, marked.content
    assert marked.json()["health"] == "failed" and marked.json()["index"] == 3
    event = AuditEvent.objects.get(action="card.health", actor=staff_client.user)
    assert event.details["reason"] == "XID 48 double-bit ECC" and event.details["to"] == "failed"
    assert staff_client.get(f"/api/v1/admin-api/nodes/{node.pk}/").json()["cards_failed"] == 1
    bad = assert_error(staff_client.post(url, {"health": "melted", "reason": "x"}, format="json"), 400,
                       "validation_error")
    assert "health" in bad["details"]
    assert "reason" in assert_error(staff_client.post(url, {"health": "ok"}, format="json"), 400,
                                    "validation_error")["details"]
    assert_error(staff_client.post("/api/v1/admin-api/cards/999999999/health/", {"health": "ok", "reason": "x"},
                                   format="json"), 404, "not_found")


def test_a_nul_in_a_slug_is_a_validation_error_not_a_500(staff_client, catalog):
    for body in ({"accelerator": "h100\x00", "price_per_card_hour": "1.00"},):
        for fmt in ("json", "multipart"):
            err = assert_error(staff_client.post("/api/v1/admin-api/prices/", body, format=fmt), 400,
                               "validation_error")
            assert "accelerator" in err["details"]
    err = assert_error(staff_client.post("/api/v1/admin-api/nodes/", {"hostname": "n1", "zone": "z\x00",
                                                                        "accelerator": "h100-sxm-80g"},
                                         format="json"), 400, "validation_error")
    assert "zone" in err["details"]
