"""The Storage page and the volume picker in headless Chromium: create a volume, attach it at instance create, see
its mount and cost on the instance page."""
import re

import pytest

from inventory.models import Zone
from provisioning.models import Instance
from storage.models import Volume, VolumeAttachment
from tests.e2e.conftest import Shots, session_cookie
from tests.factories.provisioning import funded, make_fleet
from tests.factories.storage import DISK_PRICE, storage_prices

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
DETAIL = re.compile(r".*/instances/[0-9a-f-]{36}/$")


def test_create_a_volume_attach_it_at_create_and_see_mount_and_cost(e2e_env, live_server, chromium, member_factory):
    make_fleet(h100=1)
    storage_prices(Zone.objects.get(slug="zone-a"))
    owner = funded(member_factory(role="owner"))
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies([session_cookie(owner, live_server)])
    page = context.new_page()
    shots = Shots(page, "storage")

    page.goto(f"{live_server.url}/storage/")
    page.fill("#id_name", "ckpt")
    page.check("input[name=kind][value=disk]")
    page.fill("#id_size_gib", "50")
    page.select_option("#id_zone", "zone-a")
    page.click("#volume-create button[type=submit]")
    page.wait_for_selector("#volumes tr[data-volume]")
    volume = Volume.objects.get(organization=owner.organization, name="ckpt")
    monthly = f"¥{50 * DISK_PRICE * 720 / 1_000_000:.2f}"  # 50 GiB × 720 h at the zone's price: ¥5.04
    row = page.locator(f"tr[data-volume='{volume.pk}']")
    assert row.locator("[data-monthly]").inner_text() == monthly
    assert "not attached" in row.inner_text() and "50 GiB" in row.inner_text()
    shots("created")

    page.goto(f"{live_server.url}/instances/new/")
    page.select_option("#id_accelerator", "h100-sxm-80g")
    box = page.locator(f"#storage-pickers input[name=volumes][value='{volume.pk}']")
    label = page.locator("#storage-pickers label", has=page.locator(f"input[value='{volume.pk}']")).inner_text()
    assert "ckpt" in label and "/data" in label and monthly in label
    box.check()
    # The live quote prices the ticked volume (50 GiB × the disk price per hour) and adds it to the total.
    page.wait_for_selector(f"#quote-mix tr[data-quote-volume='{volume.pk}']")
    assert page.locator("#quote-volumes-price").get_attribute("data-ucny") == str(50 * DISK_PRICE)
    cards = int(page.locator("#quote-price").get_attribute("data-ucny"))
    assert page.locator("#quote-total").get_attribute("data-ucny") == str(cards + 50 * DISK_PRICE)
    shots("picked")
    page.click("#create-submit")
    page.wait_for_url(DETAIL)
    instance = Instance.objects.get(organization=owner.organization)
    assert str(instance.pk) in page.url
    assert VolumeAttachment.objects.live().filter(volume=volume, instance_id=instance.pk, mount_path="/data").exists()
    mounts = page.locator("#mounts").inner_text()
    assert "/data" in mounts and "ckpt" in mounts and f"{monthly}/month" in mounts
    assert monthly in page.inner_text("#storage-cost")
    shots("instance-page")

    page.goto(f"{live_server.url}/storage/")
    assert "/data" in page.locator(f"tr[data-volume='{volume.pk}']").inner_text()
    assert instance.name in page.locator(f"tr[data-volume='{volume.pk}']").inner_text()
