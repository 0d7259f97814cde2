"""The Images page in headless Chromium against a real registry on loopback: a refused login shows on the password
field (the typed password gone from the page), the registered image is listed with its login "set", and Delete asks
first, then removes it."""
import pytest

from inventory.models import CustomImage
from tests.e2e.conftest import Shots, session_cookie
from tests.factories.provisioning import funded

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_register_then_delete_an_image_in_the_browser(e2e_env, live_server, chromium, member_factory,
                                                       image_registry):
    owner = funded(member_factory(role="owner"))
    image_registry.push("team/trainer", "1.0")
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies([session_cookie(owner, live_server)])
    page = context.new_page()
    shots = Shots(page, "custom-images")

    page.goto(f"{live_server.url}/images/")
    page.fill("#id_name", "trainer")
    page.fill("#id_reference", f"{image_registry.host}/team/trainer:1.0")
    page.fill("#id_username", "puller")
    page.fill("#id_password", "wrong-pass")
    page.click("#custom-image-register button[type=submit]")
    page.wait_for_selector("text=refused these credentials")
    assert page.input_value("#id_password") == ""  # never rendered back
    assert "wrong-pass" not in page.content()
    shots("refused")

    page.fill("#id_password", "right-pass")
    page.click("#custom-image-register button[type=submit]")
    page.wait_for_selector("#custom-images tr[data-image]")
    image = CustomImage.objects.get(organization=owner.organization)
    row = page.locator(f"tr[data-image='{image.pk}']")
    assert row.locator("[data-credentials]").inner_text() == "set"
    assert "right-pass" not in page.content()
    shots("registered")

    page.once("dialog", lambda dialog: dialog.accept())
    page.click(f"[data-delete-image='{image.pk}']")
    page.wait_for_selector("text=No private images yet.")
    assert not CustomImage.objects.filter(pk=image.pk).exists()
    shots("deleted")
