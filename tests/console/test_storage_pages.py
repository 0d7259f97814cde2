"""The Storage page without a browser: create, grow, delete (asks first, naming what is lost; refused while
attached), the over-quota flag, the library, and what a viewer may not do."""
import re

import pytest

from inventory.models import Zone
from storage.choices import VolumeState
from storage.models import Volume
from storage.services import volume_attach
from tests.console.conftest import login_client
from tests.factories.provisioning import InstanceFactory, funded, make_fleet
from tests.factories.storage import DatasetFactory, make_volume, storage_prices

pytestmark = pytest.mark.django_db


@pytest.fixture
def zone():
    make_fleet(h100=1)
    z = Zone.objects.get(slug="zone-a")
    storage_prices(z)
    return z


def test_create_grow_and_delete_a_volume(member_factory, zone):
    owner = funded(member_factory(role="owner"))
    client = login_client(owner)
    r = client.post("/storage/", {"name": "ckpt", "kind": "shared", "size_gib": "40", "zone": "zone-a"})
    assert r.status_code == 302, r.content.decode()[:2000]
    volume = Volume.objects.get(organization=owner.organization, name="ckpt")
    assert (volume.kind, volume.size_gib) == ("shared", 40)
    page = client.get("/storage/").content.decode()
    assert "ckpt" in page and "not attached" in page and "¥7.20" in page  # 40 GiB × 720 h × 250 µCNY

    assert client.post(f"/storage/volumes/{volume.pk}/grow/", {"size_gib": "60"}).status_code == 302
    volume.refresh_from_db()
    assert volume.size_gib == 60
    client.post(f"/storage/volumes/{volume.pk}/grow/", {"size_gib": "10"})  # never shrinks
    volume.refresh_from_db()
    assert volume.size_gib == 60

    confirm = client.get(f"/storage/volumes/{volume.pk}/delete/").content.decode()
    assert "Delete the volume ckpt?" in confirm and "erased for good" in confirm and "60 GiB" in confirm
    assert Volume.objects.get(pk=volume.pk).state != VolumeState.DELETED  # the GET only asked
    assert client.post(f"/storage/volumes/{volume.pk}/delete/").status_code == 302
    assert Volume.objects.get(pk=volume.pk).state == VolumeState.DELETED


def test_deleting_an_attached_volume_is_refused_and_shown(member_factory, zone):
    owner = funded(member_factory(role="owner"))
    volume = make_volume(owner.organization, zone, name="data", size_gib=10)
    inst = InstanceFactory(organization=owner.organization, state="stopped", name="trainer")
    volume_attach(org=owner.organization, volume_id=volume.pk, instance_id=inst.pk, zone_id=zone.pk)
    client = login_client(owner)
    page = client.get("/storage/").content.decode()
    assert "trainer" in page and "/data" in page
    r = client.post(f"/storage/volumes/{volume.pk}/delete/", follow=True)
    assert "attached" in r.content.decode()
    assert Volume.objects.get(pk=volume.pk).state != VolumeState.DELETED


def test_over_quota_and_the_library_are_shown(member_factory, zone):
    owner = funded(member_factory(role="owner"))
    volume = make_volume(owner.organization, zone, name="full", size_gib=1)
    Volume.objects.filter(pk=volume.pk).update(usage_gib="1.500", over_quota=True)
    DatasetFactory(slug="imagenet-1k", name="ImageNet-1K", size_gib=150, zones=[zone])
    page = login_client(owner).get("/storage/").content.decode()
    assert "data-over-quota" in page and "1.500 of 1 GiB" in page
    assert "ImageNet-1K" in page and "/datasets/imagenet-1k" in page


def test_a_viewer_sees_but_cannot_change(member_factory, zone):
    owner = funded(member_factory(role="owner"))
    volume = make_volume(owner.organization, zone, name="data", size_gib=10)
    viewer = login_client(member_factory(role="viewer", org=owner.organization))
    page = viewer.get("/storage/").content.decode()
    assert "data" in page and "Create a volume" not in page
    assert viewer.post("/storage/", {"name": "x", "kind": "disk", "size_gib": "1", "zone": "zone-a"}).status_code == 403
    assert viewer.post(f"/storage/volumes/{volume.pk}/grow/", {"size_gib": "20"}).status_code == 403
    assert viewer.post(f"/storage/volumes/{volume.pk}/delete/").status_code == 403
    assert Volume.objects.get(pk=volume.pk).size_gib == 10


def test_the_quote_adds_the_picked_volumes_price(member_factory, zone):
    """The new-instance quote prices the picked volumes as the API's quote does, and adds them to the total."""
    from tests.console.test_instances import H100_2

    owner = funded(member_factory(role="owner"))
    volume = make_volume(owner.organization, zone, name="ckpt", size_gib=40, kind="shared")
    client = login_client(owner)
    bare = client.post("/instances/quote/", {**H100_2, "count": "1"}).content.decode()
    assert 'id="quote-volumes"' not in bare
    quote = client.post("/instances/quote/", {**H100_2, "count": "1", "volumes": [str(volume.pk)]}).content.decode()
    cards = int(re.search(r'id="quote-price" data-ucny="(\d+)"', quote).group(1))
    assert f'data-quote-volume="{volume.pk}"' in quote and "Volume ckpt" in quote
    assert 'id="quote-volumes-price" data-ucny="10000"' in quote  # 40 GiB × 250 µCNY
    assert f'id="quote-total" data-ucny="{cards + 10_000}"' in quote
    api = client.post("/api/v1/quotes/", {"items": [{"accelerator": "h100-sxm-80g", "count": 1}], "kind": "container",
                                          "volumes": [{"volume": str(volume.pk)}]}, content_type="application/json")
    assert api.status_code == 200, api.content
    assert api.json()["volumes_price_per_hour"] == "0.010000"
    # Another organization's volume prices nothing: the form offers only the user's own volumes.
    other = make_volume(funded(member_factory(role="owner")).organization, zone, name="theirs", size_gib=40)
    assert "theirs" not in client.post("/instances/quote/", {**H100_2, "volumes": [str(other.pk)]}).content.decode()


def test_volumes_warned_of_deletion_show_a_banner_on_every_page(member_factory):
    """After the 7-day warning, every console page of the organization names the volume and when it goes."""
    from datetime import timedelta

    from core.dbclock import db_now
    from storage.retention import volumes_retention_sweep
    from tests.factories.billing import fund
    from tests.storage.test_retention import broke_org_with_volume

    owner, volume = broke_org_with_volume(member_factory)
    client = login_client(owner)
    t = db_now()
    volumes_retention_sweep(now=t)
    assert 'id="volume-deletion-banner"' not in client.get("/dashboard/").content.decode()  # not yet warned
    volumes_retention_sweep(now=t + timedelta(days=24))
    for path in ("/dashboard/", "/storage/", "/instances/"):
        page = client.get(path).content.decode()
        banner = page.split('id="volume-deletion-banner"')[1].split("</div>")[0]
        assert f'data-deletion-volume="{volume.pk}"' in banner and "ckpt (100 GiB" in banner, path
        assert "/billing/topup/" in banner, path
    viewer = login_client(member_factory(role="viewer", org=owner.organization))
    banner = viewer.get("/dashboard/").content.decode().split('id="volume-deletion-banner"')[1].split("</div>")[0]
    assert "ckpt" in banner and "Ask a member who may top up" in banner
    stranger = login_client(funded(member_factory(role="owner")))
    assert 'id="volume-deletion-banner"' not in stranger.get("/dashboard/").content.decode()
    fund(owner.organization, 100_000_000, key="banner-topup")
    volumes_retention_sweep(now=t + timedelta(days=25))
    assert 'id="volume-deletion-banner"' not in client.get("/dashboard/").content.decode()
