"""The instances and quotes API: roles × scopes, tenant isolation, query counts, validation errors."""
import uuid

import pytest
from rest_framework.test import APIClient

from inventory.models import CardAllocation
from provisioning.models import Instance, NodeGroup
from tests.factories.provisioning import InstanceFactory, container_body, funded, make_fleet
from tests.factories.tenancy import SshKeyFactory, make_token
from tests.provisioning.list_reads import list_queries

pytestmark = pytest.mark.django_db
URL = "/api/v1/instances/"


def bearer(membership, scope="write"):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(membership, scope)[1]}")
    return client


# --- roles and scopes (SPEC §5) -----------------------------------------------------------------

@pytest.mark.parametrize(("role", "read_ok", "write_ok"), [
    ("owner", True, True), ("admin", True, True), ("member", True, True),
    ("billing", False, False), ("viewer", True, False)])
def test_roles(member_factory, session_client_for, role, read_ok, write_ok):
    make_fleet(h100=1)
    m = funded(member_factory(role=role))
    client = session_client_for(m)
    inst = InstanceFactory(organization=m.organization, state="running")
    assert (client.get(URL).status_code == 200) is read_ok
    assert (client.get(f"{URL}{inst.pk}/").status_code == 200) is read_ok
    assert (client.get(f"{URL}{inst.pk}/events/").status_code == 200) is read_ok
    assert (client.get(f"{URL}{inst.pk}/readiness/").status_code == 200) is read_ok
    assert (client.post("/api/v1/quotes/", container_body(), format="json").status_code == 200) is read_ok
    r = client.post(URL, container_body(), format="json")
    assert r.status_code == (201 if write_ok else 403), r.json()
    if not write_ok:
        assert r.json()["error"]["code"] == "permission_denied"
        for action in ("stop", "start"):
            assert client.post(f"{URL}{inst.pk}/{action}/").status_code == 403
        assert client.delete(f"{URL}{inst.pk}/").status_code == 403


def test_read_scope_token_reads_but_cannot_write(member_factory):
    make_fleet(h100=1)
    m = funded(member_factory(role="owner"))
    client = bearer(m, "read")
    inst = InstanceFactory(organization=m.organization, state="running")
    assert client.get(URL).status_code == 200
    assert client.post("/api/v1/quotes/", container_body(), format="json").status_code == 200
    assert client.post(URL, container_body(), format="json").status_code == 403
    assert client.post(f"{URL}{inst.pk}/stop/").status_code == 403
    assert bearer(m, "write").post(URL, container_body(), format="json").status_code == 201


def test_anonymous_is_401(api_client):
    assert api_client.get(URL).status_code in (401, 403)
    assert api_client.get(URL).json()["error"]["code"] == "not_authenticated"


# --- tenant isolation ------------------------------------------------------------------------------

def test_other_organizations_instance_is_404_everywhere(client, member_factory):
    other = InstanceFactory(organization=member_factory(role="owner").organization, state="running")
    for path in ("", "events/", "readiness/"):
        r = client.get(f"{URL}{other.pk}/{path}")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert client.post(f"{URL}{other.pk}/stop/").status_code == 404
    assert client.post(f"{URL}{other.pk}/start/").status_code == 404
    assert client.delete(f"{URL}{other.pk}/").status_code == 404
    assert client.get(f"{URL}not-a-uuid/").status_code == 404
    assert client.get(f"{URL}{uuid.uuid4()}/").status_code == 404
    assert other.pk not in [x["id"] for x in client.get(URL).json()["results"]]
    other.refresh_from_db()
    assert other.state == "running"


# --- lists: envelope, filter, constant queries ---------------------------------------------------

def _instances(org, n, node):
    for i in range(n):
        inst = InstanceFactory(organization=org, state="running" if i % 2 else "stopped")
        NodeGroup.objects.create(instance=inst, item_index=0, accelerator="h100-sxm-80g", node=node,
                                 card_indices=[i % 8], card_ids=[])


def test_list_queries_do_not_grow_with_the_page(client, owner):
    node = make_fleet(h100=1)[0]
    _instances(owner.organization, 2, node)
    few, body = list_queries(client, f"{URL}?limit=500")
    assert body["count"] == 2 and set(body) == {"count", "next", "previous", "results"}
    _instances(owner.organization, 48, node)
    many, body = list_queries(client, f"{URL}?limit=500")
    assert body["count"] == 50 and len(body["results"]) == 50
    assert few == many
    running, body = list_queries(client, f"{URL}?state=running")
    assert body["count"] == 25 and {x["state"] for x in body["results"]} == {"running"}


def _production_mix(org, n, node):
    """n instances as a busy organization has them: running with an open meter and a posted charge, monthly with an
    active package, waitlisted (a position to compute), stopped."""
    from datetime import timedelta

    from billing.models import Package
    from core.dbclock import db_now
    from tests.factories.billing import MeterFactory

    now = db_now()
    for i in range(n):
        kind = i % 4
        state = ("running", "running", "waitlisted", "stopped")[kind]
        inst = InstanceFactory(organization=org, state=state, billing="monthly" if kind == 1 else "on_demand",
                               waitlist=kind == 2, waitlisted_at=now - timedelta(minutes=n - i) if kind == 2 else None)
        if state == "running":
            NodeGroup.objects.create(instance=inst, item_index=0, accelerator="h100-sxm-80g", node=node,
                                     card_indices=[i % 8], card_ids=[])
        if kind == 0:
            MeterFactory(organization=org, instance_id=inst.pk, opened_at=now - timedelta(hours=1),
                         posted_through_seconds=1800, posted_amount=950_000)
        if kind == 1:
            Package.objects.create(organization=org, instance_id=inst.pk, items=inst.items, rate_per_hour=1_900_000,
                                   amount=720 * 1_900_000, starts_at=now - timedelta(days=1),
                                   ends_at=now + timedelta(days=29))


def test_list_queries_do_not_grow_with_page_or_organization_size(client, owner):
    # Per-row figures (cost so far, waitlist position, package) come from one query per page, whatever the page
    # holds and however many instances the organization has.
    node = make_fleet(h100=1)[0]
    _production_mix(owner.organization, 8, node)
    small_page, body = list_queries(client, f"{URL}?limit=4")
    assert len(body["results"]) == 4 and {x["state"] for x in body["results"]} >= {"running", "waitlisted"}
    small_org, body = list_queries(client, f"{URL}?limit=100")
    assert body["count"] == 8
    _production_mix(owner.organization, 72, node)
    large_org, body = list_queries(client, f"{URL}?limit=100")
    assert body["count"] == 80 and len(body["results"]) == 80
    assert {x["waitlist_position"] for x in body["results"] if x["state"] == "waitlisted"} == set(range(1, 21))
    large_page, _ = list_queries(client, f"{URL}?limit=4")
    assert small_page == small_org == large_org == large_page


def test_state_filter_rejects_unknown_states(client):
    r = client.get(f"{URL}?state=flying")
    assert r.status_code == 400 and "state" in r.json()["error"]["details"]


def test_state_filter_takes_comma_separated_and_repeated_states(client, owner):
    for state in ("running", "stopped", "waitlisted", "failed"):
        InstanceFactory(organization=owner.organization, state=state)
    for query in ("?state=running,stopped", "?state=running&state=stopped", "?state=running,&state=stopped"):
        r = client.get(URL + query)
        assert r.status_code == 200, (query, r.json())
        assert sorted(x["state"] for x in r.json()["results"]) == ["running", "stopped"], query
    r = client.get(f"{URL}?state=running,flying")  # each comma-separated state is still checked
    assert r.status_code == 400 and r.json()["error"]["code"] == "validation_error"
    assert "state" in r.json()["error"]["details"]


# --- validation ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("patch", "field"), [
    ({"kind": "vm"}, "kind"),
    ({"items": [{"accelerator": "h100-sxm-80g", "count": 0}]}, "items"),
    ({"items": []}, "items"),
    ({"items": [{"accelerator": "nope", "count": 1}]}, "items"),
    ({"items": [{"accelerator": "h100-sxm-80g", "count": 9}]}, "items"),
    ({"policy": {"total_cards": 4, "compatible_vendors": ["nvidia"]}}, "items"),  # both
    ({"image": ""}, "image"),
    ({"image": "cann-torch-npu"}, "image"),  # does not run on nvidia
    ({"image": "no-such-image"}, "image"),
    ({"zone": "nowhere"}, "zone"),
    ({"ssh_key_ids": ["not-a-uuid"]}, "ssh_key_ids"),
    ({"ssh_key_ids": [str(uuid.uuid4())]}, "ssh_key_ids"),
    ({"billing": "yearly"}, "billing"),
    ({"waitlist": "perhaps"}, "waitlist"),
])
def test_create_validation_errors(client, patch, field):
    make_fleet(h100=1)
    body = {**container_body("h100-sxm-80g", 2), **patch}
    r = client.post(URL, body, format="json")
    assert r.status_code == 400, r.json()
    error = r.json()["error"]
    assert error["code"] == "validation_error", error
    assert any(key == field or key.startswith(f"{field}.") for key in error["details"]), error
    assert not Instance.objects.exists()


def test_nested_errors_name_the_field_by_its_path(owner):
    """An item's or a policy's field error is {"items.0.count": [message]}: plain strings, never the repr
    of DRF's nested error structure (was: "{0: {'count': [ErrorDetail(string=…)]}}")."""
    make_fleet(h100=1)
    client = bearer(owner)
    r = client.post(URL, {**container_body("h100-sxm-80g", 2), "name": "",
                          "items": [{"accelerator": "h100-sxm-80g", "count": 1},
                                    {"accelerator": "h100-sxm-80g", "count": -2}]}, format="json")
    details = r.json()["error"]["details"]
    assert r.status_code == 400 and set(details) == {"name", "items.1.count"}, details
    assert details["items.1.count"] == ["Ensure this value is greater than or equal to 1."]
    r = client.post("/api/v1/quotes/", {"kind": "container", "image": "pytorch-2.3-cuda12.3",
                                        "policy": {"total_cards": "many", "compatible_vendors": ["nvidia"]}},
                    format="json")
    details = r.json()["error"]["details"]
    assert r.status_code == 400 and list(details) == ["policy.total_cards"], details
    assert all(isinstance(m, str) and "ErrorDetail" not in m for ms in details.values() for m in ms)
    r = client.post(URL, {**container_body("h100-sxm-80g", 2), "items": []}, format="json")
    assert r.json()["error"]["details"] == {"items": ["This list may not be empty."]}  # the list's own error


def test_bare_metal_must_take_whole_nodes(client):
    make_fleet(h100=1)
    r = client.post(URL, {**container_body("h100-sxm-80g", 4), "kind": "bare_metal"}, format="json")
    assert r.status_code == 400 and "items" in r.json()["error"]["details"]


def test_hybrid_needs_an_image_per_vendor(client):
    make_fleet(h100=1, ascend=1)
    body = {"kind": "container", "items": [{"accelerator": "h100-sxm-80g", "count": 1},
                                           {"accelerator": "ascend-910b", "count": 1}],
            "images": {"nvidia": "pytorch-2.3-cuda12.3"}}
    r = client.post(URL, body, format="json")
    assert r.status_code == 400 and "images" in r.json()["error"]["details"]


def test_someone_elses_ssh_key_is_refused_and_own_keys_are_copied(client, owner):
    make_fleet(h100=1)
    theirs = SshKeyFactory()
    r = client.post(URL, container_body(ssh_key_ids=[str(theirs.pk)]), format="json")
    assert r.status_code == 400 and "ssh_key_ids" in r.json()["error"]["details"]
    mine = SshKeyFactory(user=owner.user)
    r = client.post(URL, container_body(ssh_key_ids=[str(mine.pk)]), format="json")
    assert r.status_code == 201
    assert Instance.objects.get(pk=r.json()["id"]).ssh_public_keys == [mine.public_key]


# --- capacity, quota, funds, waitlist, idempotency -----------------------------------------------

def test_sold_out_is_409_and_keeps_nothing_unless_waitlisted(client):
    make_fleet(h100=1)
    assert client.post(URL, container_body(count=8), format="json").status_code == 201
    r = client.post(URL, container_body(count=1), format="json")
    assert r.status_code == 409 and r.json()["error"]["code"] == "insufficient_capacity"
    assert Instance.objects.count() == 1
    r = client.post(URL, container_body(count=1, waitlist=True), format="json")
    assert r.status_code == 202 and r.json()["state"] == "waitlisted" and r.json()["waitlist_position"] == 1
    r2 = client.post(URL, container_body(count=1, waitlist=True), format="json")
    assert r2.json()["waitlist_position"] == 2
    # Cancelling a waitlisted instance is a terminate.
    assert client.delete(f"{URL}{r.json()['id']}/").json()["state"] == "terminating"


def test_quota_exceeded(client, owner):
    make_fleet(h100=3)
    owner.organization.card_quota = 10
    owner.organization.save()
    assert client.post(URL, container_body(count=8), format="json").status_code == 201
    r = client.post(URL, container_body(count=4), format="json")
    assert r.status_code == 409 and r.json()["error"]["code"] == "quota_exceeded"
    assert client.post(URL, container_body(count=2), format="json").status_code == 201


def test_insufficient_funds_is_402(member_factory, session_client_for):
    make_fleet(h800=1)
    poor = session_client_for(member_factory(role="owner"))  # no money at all
    r = poor.post(URL, container_body("h800-sxm-80g", 8), format="json")
    assert r.status_code == 402 and r.json()["error"]["code"] == "insufficient_funds"
    assert not CardAllocation.objects.filter(released_at__isnull=True).exists()


def test_idempotent_create(client):
    make_fleet(h100=1)
    headers = {"HTTP_IDEMPOTENCY_KEY": "abc-1"}
    a = client.post(URL, container_body(count=2), format="json", **headers)
    b = client.post(URL, container_body(count=2), format="json", **headers)
    assert a.status_code == b.status_code == 201 and a.json()["id"] == b.json()["id"]
    assert Instance.objects.count() == 1
    c = client.post(URL, container_body(count=3), format="json", **headers)
    assert c.status_code == 422


def test_stop_of_a_stopped_instance_is_409(client, owner):
    inst = InstanceFactory(organization=owner.organization, state="stopped")
    r = client.post(f"{URL}{inst.pk}/stop/")
    assert r.status_code == 409 and r.json()["error"]["code"] == "invalid_state"
    # The states by their API values, not the enum's repr ("InstanceState.STOPPING").
    assert r.json()["error"]["message"] == "An instance in state 'stopped' cannot become 'stopping'."
    assert r.json()["error"]["details"] == {"state": ["stopped"], "requested": ["stopping"]}


# --- quotes ----------------------------------------------------------------------------------------

def test_quote_for_items(client):
    make_fleet(h100=1)
    r = client.post("/api/v1/quotes/", container_body("h100-sxm-80g", 4), format="json")
    assert r.status_code == 200
    body = r.json()
    assert body["items"] == [{"accelerator": "h100-sxm-80g", "count": 4, "price_per_card_hour": "1.900000",
                              "cpus": None, "memory_mib": None, "memory_gib": None,  # the node's size: unknown
                              "busbw_gbps": None}]  # the node was never measured
    assert body["price_per_hour"] == "7.600000" and body["price_per_second"] == "0.002111111"
    assert body["available"] is True and body["domestic_share"] == 0.0
    assert not CardAllocation.objects.exists()  # a quote takes nothing
    r = client.post("/api/v1/quotes/", container_body("h800-sxm-80g", 4), format="json")
    assert r.json()["available"] is False and r.json()["price_per_hour"] == "27.200000"


def test_quote_for_a_policy_chooses_the_cheapest_mix(client):
    make_fleet(h100=1, ascend=1, h800=1)
    body = {"kind": "container", "policy": {"total_cards": 8, "compatible_vendors": ["nvidia", "huawei"],
                                            "min_domestic_share": 0.5}}
    r = client.post("/api/v1/quotes/", body, format="json")
    assert r.status_code == 200, r.json()
    q = r.json()
    assert q["available"] is True and q["domestic_share"] >= 0.5
    assert {i["accelerator"] for i in q["items"]} == {"ascend-910b", "h100-sxm-80g"}
    assert q["price_per_hour"] == "17.200000"  # 4 × 2.40 + 4 × 1.90


def test_quote_validation_error(client):
    r = client.post("/api/v1/quotes/", {"kind": "container"}, format="json")
    assert r.status_code == 400 and "items" in r.json()["error"]["details"]


def test_a_real_zone_without_that_accelerator_is_sold_out_not_invalid(client):
    from tests.factories.provisioning import container_body, make_fleet

    make_fleet(h100=1)
    make_fleet(zone="zone-npu", ascend=1)
    body = {**container_body("h100-sxm-80g", 1), "zone": "zone-npu"}
    sold_out = client.post("/api/v1/instances/", body, format="json")
    assert sold_out.status_code == 409 and sold_out.json()["error"]["code"] == "insufficient_capacity"
    waiting = client.post("/api/v1/instances/", {**body, "waitlist": True}, format="json")
    assert waiting.status_code == 202 and waiting.json()["state"] == "waitlisted"
    unknown = client.post("/api/v1/instances/", {**body, "zone": "zone-mars"}, format="json")
    assert unknown.status_code == 400 and "zone" in unknown.json()["error"]["details"]
