"""The Images page and Save as image in the console, against a real registry on loopback: register (the registry's
refusals on the field they name, the login never rendered again: "set" / "not set"), pick the private image in the
create form, delete after asking; the instance page's Save as image (bare metal and a platform without a registry
refused with a clear message); a viewer reads but changes nothing; another organization's image is a 404."""
import pytest

from inventory.models import CustomImage
from provisioning.models import Instance
from tests.console.conftest import login_client
from tests.factories.inventory import custom_image
from tests.factories.provisioning import InstanceFactory, funded, make_fleet

pytestmark = pytest.mark.django_db


def test_register_pick_and_delete_a_private_image(member_factory, image_registry):
    make_fleet(h100=1)
    owner = funded(member_factory(role="owner"))
    client = login_client(owner)
    image_registry.push("team/trainer", "1.0")
    reference = f"{image_registry.host}/team/trainer:1.0"

    wrong = client.post("/images/", {"name": "trainer", "reference": reference, "vendors": ["nvidia"],
                                     "username": "puller", "password": "wrong-pass"})
    page = wrong.content.decode()
    assert wrong.status_code == 200 and "refused these credentials" in page and "wrong-pass" not in page
    missing = client.post("/images/", {"name": "trainer", "reference": f"{image_registry.host}/team/none:1",
                                       "vendors": ["nvidia"], "username": "puller", "password": "right-pass"})
    assert "does not exist" in missing.content.decode() and "right-pass" not in missing.content.decode()
    assert not CustomImage.objects.exists()

    r = client.post("/images/", {"name": "trainer", "reference": reference, "vendors": ["nvidia"],
                                 "username": "puller", "password": "right-pass"})
    assert r.status_code == 302, r.content.decode()[:2000]
    image = CustomImage.objects.get(organization=owner.organization)
    page = client.get("/images/").content.decode()
    assert "trainer" in page and reference in page and "right-pass" not in page
    assert f'data-image="{image.pk}"' in page and ">set<" in page

    form = client.get("/instances/new/").content.decode()
    assert f'value="{image.pk}"' in form  # offered for NVIDIA cards
    r = client.post("/instances/new/", {"name": "mine", "mode": "items", "kind": "container",
                                        "accelerator": "h100-sxm-80g", "count": "1", "billing": "on_demand",
                                        "image_nvidia": str(image.pk)})
    assert r.status_code == 302, r.content.decode()[:3000]
    assert Instance.objects.get(organization=owner.organization, name="mine").images == {"nvidia": str(image.pk)}

    confirm = client.get(f"/images/{image.pk}/delete/").content.decode()
    assert "Delete the image trainer?" in confirm
    assert CustomImage.objects.filter(pk=image.pk).exists()  # the GET only asked
    assert client.post(f"/images/{image.pk}/delete/").status_code == 302
    assert not CustomImage.objects.filter(pk=image.pk).exists()


def test_save_as_image_on_the_instance_page(member_factory, settings):
    owner = funded(member_factory(role="owner"))
    client = login_client(owner)
    running = InstanceFactory(organization=owner.organization, state="running")
    settings.IMAGE_SAVE_REGISTRY = ""
    assert "not set up on this platform" in client.get(f"/instances/{running.pk}/").content.decode()
    settings.IMAGE_SAVE_REGISTRY = "registry.example.com"
    page = client.get(f"/instances/{running.pk}/").content.decode()
    assert "data-save-image" in page
    stopped = InstanceFactory(organization=owner.organization, state="stopped")
    assert "a stop removes its container" in client.get(f"/instances/{stopped.pk}/").content.decode()
    bare = InstanceFactory(organization=owner.organization, kind="bare_metal", state="running")
    assert "data-save-image" not in client.get(f"/instances/{bare.pk}/").content.decode()
    r = client.post(f"/images/save/{bare.pk}/", {"name": "x", "tag": "v1"}, follow=True)
    assert "container instances only" in r.content.decode()
    assert not CustomImage.objects.exists()


def test_a_viewer_reads_and_another_organization_gets_404(member_factory):
    viewer = member_factory(role="viewer")
    image = custom_image(viewer.organization, password="pull-s3cret",
                         reference="registry.example.com/acme/secret-model:2.0")
    client = login_client(viewer)
    page = client.get("/images/").content.decode()
    assert image.reference in page and "pull-s3cret" not in page and "custom-image-register" not in page
    assert client.post(f"/images/{image.pk}/delete/").status_code == 403
    assert client.post("/images/", {"name": "x", "reference": "a/b"}).status_code == 403
    stranger = login_client(member_factory(role="owner"))
    assert stranger.get(f"/images/{image.pk}/delete/").status_code == 404
    assert stranger.post(f"/images/{image.pk}/delete/").status_code == 404
    assert image.reference not in stranger.get("/images/").content.decode()
    assert CustomImage.objects.filter(pk=image.pk).exists()
