"""GET /api/v1/zones/ (stock per accelerator in each zone) and `?zone=` on the catalog: fields, errors, the
schema, constant query counts. Catalog data, the same for every tenant (isolation: tests/security)."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from inventory.choices import CardHealth, NodeState
from inventory.models import Card
from tests.factories.inventory import CardAllocationFactory, NodeFactory, ZoneFactory

from .test_api import ROLES, assert_error

pytestmark = pytest.mark.django_db


def _world(catalog):
    """za: two H100 nodes (one card held, one failed) and a retired 910B one; zb: a 4-card 910B node."""
    za = ZoneFactory(slug="za", name="Zone A", fabric_kind="infiniband", fabric_gbps=400)
    zb = ZoneFactory(slug="zb", name="Zone B")
    n1 = NodeFactory(zone=za, accelerator=catalog["h100-sxm-80g"])
    CardAllocationFactory(card=n1.cards.get(index=0))
    Card.objects.filter(node=n1, index=1).update(health=CardHealth.FAILED)
    NodeFactory(zone=za, accelerator=catalog["h100-sxm-80g"], state=NodeState.DRAINING)
    NodeFactory(zone=za, accelerator=catalog["ascend-910b"], state=NodeState.RETIRED)
    NodeFactory(zone=zb, accelerator=catalog["ascend-910b"], card_count=4)
    ZoneFactory(slug="zc", name="Empty")
    return za, zb


@pytest.mark.parametrize("role", ROLES)
def test_zones_list_stock_per_accelerator_for_every_role(role, member_factory, session_client_for, catalog):
    _world(catalog)
    client = session_client_for(member_factory(role=role))
    body = client.get("/api/v1/zones/").json()
    zones = {z["slug"]: z for z in body["results"]}
    assert body["count"] == 3 and set(zones) == {"za", "zb", "zc"}
    assert zones["za"] == {"slug": "za", "name": "Zone A", "fabric_kind": "infiniband", "fabric_gbps": 400,
                           "inter_node_floor_gbps": zones["za"]["inter_node_floor_gbps"],
                           "stock": [{"accelerator": "h100-sxm-80g", "available_cards": 6, "total_cards": 16}]}
    assert zones["zb"]["stock"] == [{"accelerator": "ascend-910b", "available_cards": 4, "total_cards": 4}]
    assert zones["zc"]["stock"] == []
    assert client.get("/api/v1/zones/zb/").json()["stock"] == zones["zb"]["stock"]
    assert_error(client.get("/api/v1/zones/mars/"), 404, "not_found")


def test_zones_need_login(api_client):
    assert_error(api_client.get("/api/v1/zones/"), 401, "not_authenticated")


def test_accelerators_filtered_by_zone_count_only_its_stock(member_factory, session_client_for, catalog):
    _world(catalog)
    client = session_client_for(member_factory(role="viewer"))

    def stock(url):
        body = client.get(url).json()
        rows = body["results"] if "results" in body else [body]
        return {r["slug"]: (r["available_cards"], r["total_cards"]) for r in rows if r["total_cards"]}

    assert stock("/api/v1/accelerators/") == {"h100-sxm-80g": (6, 16), "ascend-910b": (4, 4)}
    assert stock("/api/v1/accelerators/?zone=za") == {"h100-sxm-80g": (6, 16)}
    assert stock("/api/v1/accelerators/?zone=zb") == {"ascend-910b": (4, 4)}
    assert stock("/api/v1/accelerators/?zone=zc") == {}
    assert stock("/api/v1/accelerators/ascend-910b/?zone=za") == {}
    assert stock("/api/v1/accelerators/ascend-910b/?zone=zb") == {"ascend-910b": (4, 4)}
    assert client.get("/api/v1/accelerators/?zone=zc").json()["count"] == 6  # the catalog, with zero stock


@pytest.mark.parametrize("zone", ["mars", "za\x00", "ZA"])
def test_an_unknown_zone_is_a_clear_validation_error(zone, member_factory, session_client_for, catalog):
    """Before: `?zone=` was ignored, and an unknown zone answered the whole fleet's stock."""
    _world(catalog)
    client = session_client_for(member_factory(role="viewer"))
    for url in ("/api/v1/accelerators/", "/api/v1/accelerators/h100-sxm-80g/"):
        error = assert_error(client.get(url, {"zone": zone}), 400, "validation_error")
        assert error["message"] == f"Unknown zone {zone!r}."
        assert error["details"] == {"zone": [f"No zone has the slug {zone!r}; GET /api/v1/zones/ lists them."]}


def _count(client, url):
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200, response.content
    return len(ctx.captured_queries), response.json()


def test_zone_queries_do_not_grow_with_zones_or_nodes(member_factory, session_client_for, catalog):
    client = session_client_for(member_factory(role="viewer"))
    _world(catalog)
    few, body = _count(client, "/api/v1/zones/")
    few_filtered, _ = _count(client, "/api/v1/accelerators/?zone=za")
    assert body["count"] == 3
    for i in range(30):
        zone = ZoneFactory(slug=f"many-{i:02}")
        for slug in ("h100-sxm-80g", "ascend-910b", "h800-sxm-80g"):
            NodeFactory(zone=zone, accelerator=catalog[slug], card_count=2)
    many, body = _count(client, "/api/v1/zones/?limit=500")
    many_filtered, _ = _count(client, "/api/v1/accelerators/?zone=many-07")
    assert body["count"] == 33
    assert [len(z["stock"]) for z in body["results"] if z["slug"].startswith("many-")] == [3] * 30
    print(f"QUERIES zones={few}/{many} accelerators?zone={few_filtered}/{many_filtered}")
    assert few == many and few_filtered == many_filtered


def test_the_schema_documents_zones_and_the_zone_filter(api_client):
    import yaml

    schema = yaml.safe_load(api_client.get("/api/v1/schema/").content)
    assert "/api/v1/zones/" in schema["paths"] and "/api/v1/zones/{slug}/" in schema["paths"]
    for path in ("/api/v1/accelerators/", "/api/v1/accelerators/{slug}/"):
        params = {p["name"]: p for p in schema["paths"][path]["get"]["parameters"]}
        assert params["zone"]["in"] == "query" and "unknown zone" in params["zone"]["description"].lower()
    zone = schema["components"]["schemas"]["Zone"]["properties"]
    assert zone["stock"]["type"] == "array"
    stock_ref = zone["stock"]["items"]["$ref"].rsplit("/", 1)[-1]
    assert set(schema["components"]["schemas"][stock_ref]["properties"]) == {"accelerator", "available_cards",
                                                                             "total_cards"}
