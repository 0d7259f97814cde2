"""The volumes and datasets API, and volumes/datasets at instance create, through the real endpoints on
PostgreSQL: create (Idempotency-Key), grow, delete (409 volume_attached), zone mismatch (400 naming the field),
another organization's volume (404), audit events, the instance body and the quote."""
import pytest
from rest_framework.test import APIClient

from billing.models import Meter
from provisioning.models import Instance
from storage.models import DatasetMount, Volume, VolumeAttachment
from tenancy.models import AuditEvent
from tests.factories.inventory import ZoneFactory
from tests.factories.provisioning import InstanceFactory, container_body, funded, make_fleet
from tests.factories.storage import DISK_PRICE, DatasetFactory, make_volume, storage_prices
from tests.factories.tenancy import make_token

pytestmark = pytest.mark.django_db
VOLUMES = "/api/v1/volumes/"


def bearer(membership, scope="write"):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(membership, scope)[1]}")
    return client


@pytest.fixture
def owner(member_factory):
    return funded(member_factory(role="owner"))


@pytest.fixture
def zone_a(db):
    make_fleet(h100=1)  # zone-a
    zone = ZoneFactory(slug="zone-a")
    storage_prices(zone)
    return zone


def test_create_get_grow_delete(owner, zone_a):
    client = bearer(owner)
    r = client.post(VOLUMES, {"name": "ckpt", "kind": "disk", "size_gib": 100, "zone": "zone-a"}, format="json",
                    HTTP_IDEMPOTENCY_KEY="vol-1")
    assert r.status_code == 201, r.json()
    body = r.json()
    assert (body["name"], body["kind"], body["size_gib"], body["zone"], body["state"]) == ("ckpt", "disk", 100,
                                                                                           "zone-a", "ready")
    assert body["price_per_gib_hour"] == "0.000140" and body["price_per_hour"] == "0.014000"
    assert body["monthly_cost"] == "10.080000" and body["attachments"] == []
    again = client.post(VOLUMES, {"name": "ckpt", "kind": "disk", "size_gib": 100, "zone": "zone-a"}, format="json",
                        HTTP_IDEMPOTENCY_KEY="vol-1")
    assert again.status_code == 201 and again.json()["id"] == body["id"]
    assert Volume.objects.filter(organization=owner.organization).count() == 1
    assert client.get(f"{VOLUMES}{body['id']}/").json()["size_gib"] == 100
    assert [v["id"] for v in client.get(VOLUMES).json()["results"]] == [body["id"]]

    grown = client.patch(f"{VOLUMES}{body['id']}/", {"size_gib": 250}, format="json")
    assert grown.status_code == 200 and grown.json()["size_gib"] == 250
    shrink = client.patch(f"{VOLUMES}{body['id']}/", {"size_gib": 10}, format="json")
    assert shrink.status_code == 400 and "size_gib" in shrink.json()["error"]["details"]
    assert Meter.objects.get(instance_id=body["id"], closed_at=None).cards == 250

    assert client.delete(f"{VOLUMES}{body['id']}/").status_code == 204
    assert client.get(f"{VOLUMES}{body['id']}/").status_code == 404
    assert not Meter.objects.filter(instance_id=body["id"], closed_at=None).exists()
    actions = set(AuditEvent.objects.filter(target_id=body["id"]).values_list("action", flat=True))
    assert actions == {"volume.create", "volume.grow", "volume.delete"}


def test_create_refusals_name_their_field(owner, zone_a):
    client = bearer(owner)
    cases = [({"name": "Bad Name", "kind": "disk", "size_gib": 1, "zone": "zone-a"}, "name"),
             ({"name": "x", "kind": "tape", "size_gib": 1, "zone": "zone-a"}, "kind"),
             ({"name": "x", "kind": "disk", "size_gib": 0, "zone": "zone-a"}, "size_gib"),
             ({"name": "x", "kind": "disk", "size_gib": 1, "zone": "nowhere"}, "zone"),
             ({"name": "x", "kind": "disk", "size_gib": 1, "zone": "zone-a", "iops": 9000}, "iops")]
    for body, field in cases:
        r = client.post(VOLUMES, body, format="json")
        assert r.status_code == 400 and r.json()["error"]["code"] == "validation_error", r.json()
        assert field in r.json()["error"]["details"], (field, r.json())
    ZoneFactory(slug="unpriced")
    r = client.post(VOLUMES, {"name": "x", "kind": "disk", "size_gib": 1, "zone": "unpriced"}, format="json")
    assert r.status_code == 400 and "No disk storage price" in r.json()["error"]["message"]
    assert not Volume.objects.exists()


def test_instance_create_attaches_volumes_and_mounts_datasets(owner, zone_a):
    disk = make_volume(owner.organization, zone_a, name="data", size_gib=100)
    shared = make_volume(owner.organization, zone_a, name="team", kind="shared", size_gib=500)
    DatasetFactory(slug="imagenet-1k", zones=[zone_a], size_gib=150)
    client = bearer(owner)
    body = container_body(volumes=[{"volume": str(disk.pk)}, {"volume": str(shared.pk)}], datasets=["imagenet-1k"])
    quote = client.post("/api/v1/quotes/", body, format="json").json()
    assert quote["volumes_price_per_hour"] == "0.139000"  # 100 × 140 + 500 × 250 µCNY
    assert quote["total_price_per_hour"] == "2.039000" and quote["price_per_hour"] == "1.900000"
    r = client.post("/api/v1/instances/", body, format="json")
    assert r.status_code == 201, r.json()
    inst = r.json()
    assert inst["zone"] == "zone-a"
    assert [(v["name"], v["mount_path"]) for v in inst["volumes"]] == [("data", "/data"), ("team", "/mnt/team")]
    assert inst["datasets"] == [{"dataset": "imagenet-1k", "name": "imagenet-1k", "kind": "dataset",
                                 "mount_path": "/datasets/imagenet-1k", "read_only": True, "size_gib": 150}]
    listed = client.get("/api/v1/instances/").json()["results"][0]
    assert listed["volumes"] == inst["volumes"] and listed["datasets"] == inst["datasets"]
    # attached: the disk cannot be deleted nor attached to another instance
    r = client.delete(f"{VOLUMES}{disk.pk}/")
    assert r.status_code == 409 and r.json()["error"]["code"] == "volume_attached"
    r = client.post("/api/v1/instances/", container_body(volumes=[{"volume": str(disk.pk)}]), format="json")
    assert r.status_code == 409 and r.json()["error"]["code"] == "volume_attached"
    assert Instance.objects.filter(organization=owner.organization).count() == 1


def test_zone_mismatch_is_a_400_naming_the_volume_and_creates_nothing(owner, zone_a):
    elsewhere = ZoneFactory(slug="zone-b")
    far = make_volume(owner.organization, elsewhere, name="far")
    near = make_volume(owner.organization, zone_a, name="near")
    client = bearer(owner)
    r = client.post("/api/v1/instances/", container_body(zone="zone-a", volumes=[{"volume": str(near.pk)},
                                                                                 {"volume": str(far.pk)}]),
                    format="json")
    assert r.status_code == 400, r.json()
    assert list(r.json()["error"]["details"]) == ["volumes[1].volume"]
    r = client.post("/api/v1/instances/", container_body(volumes=[{"volume": str(near.pk)},
                                                                  {"volume": str(far.pk)}]), format="json")
    assert r.status_code == 400 and "volumes[1].volume" in r.json()["error"]["details"]
    assert not Instance.objects.exists() and not VolumeAttachment.objects.exists()


def test_another_organizations_volume_is_404_everywhere(owner, zone_a, member_factory):
    other = funded(member_factory(role="owner"))
    theirs = make_volume(other.organization, zone_a, name="secret")
    client = bearer(owner)
    for method, url, body in [("get", f"{VOLUMES}{theirs.pk}/", None),
                              ("patch", f"{VOLUMES}{theirs.pk}/", {"size_gib": 900}),
                              ("delete", f"{VOLUMES}{theirs.pk}/", None)]:
        r = getattr(client, method)(url, body, format="json")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.post("/api/v1/instances/", container_body(volumes=[{"volume": str(theirs.pk)}]), format="json")
    assert r.status_code == 404 and "volumes[0].volume" in r.json()["error"]["details"]
    mine = InstanceFactory(organization=owner.organization, state="stopped", zone=zone_a)
    r = client.post(f"/api/v1/instances/{mine.pk}/volumes/", {"volume": str(theirs.pk)}, format="json")
    assert r.status_code == 404
    theirs.refresh_from_db()
    assert theirs.size_gib == 100 and theirs.state == "ready" and not VolumeAttachment.objects.exists()


def test_attach_and_detach_a_stopped_instance_only(owner, zone_a):
    disk = make_volume(owner.organization, zone_a, name="data")
    client = bearer(owner)
    running = InstanceFactory(organization=owner.organization, state="running", zone=zone_a)
    r = client.post(f"/api/v1/instances/{running.pk}/volumes/", {"volume": str(disk.pk)}, format="json")
    assert r.status_code == 409 and r.json()["error"]["code"] == "invalid_state"
    stopped = InstanceFactory(organization=owner.organization, state="stopped", zone=None)
    r = client.post(f"/api/v1/instances/{stopped.pk}/volumes/", {"volume": str(disk.pk), "mount_path": "/ckpt"},
                    format="json")
    assert r.status_code == 201, r.json()
    assert r.json()["volumes"][0]["mount_path"] == "/ckpt" and r.json()["zone"] == "zone-a"  # pinned to its zone
    other = make_volume(owner.organization, zone_a, name="other")
    r = client.post(f"/api/v1/instances/{stopped.pk}/volumes/", {"volume": str(other.pk), "mount_path": "/etc"},
                    format="json")
    assert r.status_code == 400 and "mount_path" in r.json()["error"]["details"]  # a system directory
    r = client.post(f"/api/v1/instances/{stopped.pk}/volumes/", {"volume": str(other.pk), "mount_path": "/ckpt"},
                    format="json")
    assert r.status_code == 400 and "mount_path" in r.json()["error"]["details"]  # taken by the first
    r = client.delete(f"/api/v1/instances/{stopped.pk}/volumes/{disk.pk}/")
    assert r.status_code == 200 and r.json()["volumes"] == []
    assert client.delete(f"/api/v1/instances/{stopped.pk}/volumes/{disk.pk}/").status_code == 404
    assert client.delete(f"{VOLUMES}{disk.pk}/").status_code == 204


def test_terminated_instances_release_their_volumes_which_are_kept(owner, zone_a):
    from provisioning.services.transitions import instance_transition_by_id

    disk = make_volume(owner.organization, zone_a, name="data")
    DatasetFactory(slug="wudao-corpus", zones=[zone_a])
    r = bearer(owner).post("/api/v1/instances/", container_body(volumes=[{"volume": str(disk.pk)}],
                                                                datasets=["wudao-corpus"]), format="json")
    inst = Instance.objects.get(pk=r.json()["id"])
    Instance.objects.filter(pk=inst.pk).update(state="terminating")
    instance_transition_by_id(instance_id=inst.pk, to="terminated", reason="test")
    assert not VolumeAttachment.objects.live().exists() and not DatasetMount.objects.live().exists()
    disk.refresh_from_db()
    assert disk.state == "ready" and Meter.objects.filter(instance_id=disk.pk, closed_at=None).exists()


def test_datasets_library_and_prices_are_catalog(owner, zone_a, member_factory):
    DatasetFactory(slug="llama-70b", kind="model", zones=[zone_a], size_gib=140, licence="Llama community licence")
    viewer = bearer(member_factory(role="billing", org=owner.organization))
    rows = viewer.get("/api/v1/datasets/").json()["results"]
    assert [(d["slug"], d["kind"], d["size_gib"], d["zones"], d["price_per_hour"]) for d in rows] == [
        ("llama-70b", "model", 140, ["zone-a"], "0.000000")]
    assert viewer.get("/api/v1/datasets/llama-70b/").json()["mount_path"] == "/datasets/llama-70b"
    prices = viewer.get("/api/v1/storage-prices/").json()["results"]
    assert {"zone": "zone-a", "kind": "disk", "price_per_gib_hour": "0.000140",
            "price_per_tib_month": "103.219200"} in prices
    assert DISK_PRICE == 140
    r = bearer(owner).post("/api/v1/instances/", container_body(datasets=["no-such-set"]), format="json")
    assert r.status_code == 400 and "datasets[0]" in r.json()["error"]["details"]


def test_openapi_schema_lists_the_storage_endpoints(api_client):
    schema = api_client.get("/api/v1/schema/?format=json").json()
    for path in ("/api/v1/volumes/", "/api/v1/volumes/{volume_id}/", "/api/v1/datasets/",
                 "/api/v1/datasets/{slug}/", "/api/v1/storage-prices/", "/api/v1/instances/{instance_id}/volumes/",
                 "/api/v1/instances/{instance_id}/volumes/{volume_id}/"):
        assert path in schema["paths"], path


def test_a_stop_says_it_keeps_the_attached_volumes(owner, zone_a):
    from provisioning.services.storage_port import volume_names_of
    from provisioning.stop_keeps import stop_keeps, stop_reason
    from storage.services import volume_attach

    inst = InstanceFactory(organization=owner.organization, state="stopped", zone=zone_a)
    assert stop_reason("container", volume_names_of(instance_id=inst.pk)) == \
        "stopped: nothing kept, its container is deleted with its disk (no volume is attached)"
    for name in ("data", "ckpt"):
        v = make_volume(owner.organization, zone_a, name=name, kind="shared")
        volume_attach(org=owner.organization, volume_id=v.pk, instance_id=inst.pk, zone_id=zone_a.pk)
    names = volume_names_of(instance_id=inst.pk)
    assert stop_reason("container", names) == \
        "stopped: kept its volumes ckpt, data, its container is deleted with the rest of its disk"
    assert stop_keeps("bare_metal", names) == "A stop keeps only its volumes ckpt, data: its nodes are wiped when released."
