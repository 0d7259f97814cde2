"""The create form's live quote in headless Chromium: an invalid field never leaves another mix's price on screen."""
import pytest

from tests.e2e.conftest import Shots, session_cookie
from tests.factories.provisioning import funded, make_fleet

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _create_form(chromium, owner, live_server, name):
    """The create form, logged in as `owner`: (page, screenshot taker)."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies([session_cookie(owner, live_server)])
    page = context.new_page()
    page.goto(f"{live_server.url}/instances/new/")
    return page, Shots(page, name)


def test_an_invalid_count_replaces_the_quote_with_what_to_fix(e2e_env, live_server, chromium, member_factory):
    make_fleet(h100=2, ascend=1)
    owner = funded(member_factory(role="owner"))
    page, shot = _create_form(chromium, owner, live_server, "quote-invalid")
    page.select_option("#id_accelerator", "h100-sxm-80g")
    page.fill("#id_count", "4")
    page.wait_for_selector("#quote-price[data-ucny='7600000']")
    _assert_quote_fits(page)
    # htmx sends nothing for an invalid form: the ¥7.60 quote for 4 cards stayed next to "-3".
    page.fill("#id_count", "-3")
    page.wait_for_selector("#quote-error")
    assert page.query_selector("#quote-price") is None
    assert page.inner_text("#quote-error").startswith("Cards: ") and "see a price" in page.inner_text("#quote-error")
    shot("negative-count")
    page.fill("#id_count", "2")  # valid again: the live quote comes back
    page.wait_for_selector("#quote-price[data-ucny='3800000']")
    assert page.query_selector("#quote-error") is None
    page.check("input[name='mode'][value='policy']")  # the invalid field inside the policy <fieldset>
    page.check("input[name='compatible_vendors'][value='nvidia']")
    page.wait_for_selector("#quote-price[data-ucny='15200000']")  # 8 × H100, the server's quote
    page.fill("#id_total_cards", "0")
    page.wait_for_selector("#quote-error")
    assert page.inner_text("#quote-error").startswith("Total cards: "), page.inner_text("#quote-error")


def _assert_quote_fits(page):
    """The mix's rows (a card name that does not wrap, its subtotal) stay inside the price card."""
    card = page.locator(".create-side .card").bounding_box()
    mix = page.locator("#quote-mix").bounding_box()
    assert mix["x"] + mix["width"] <= card["x"] + card["width"], "the quote's mix runs out of its card"


def test_a_ticked_waitlist_survives_the_quota_banner_and_the_validation_note(e2e_env, live_server, chromium,
                                                                             member_factory):
    # The checkbox sat in the quote's sold-out banner: the over-quota banner and console.js's "fix it" note replaced
    # the quote and the checkbox with it, and the quote came back unticked, so Create failed as sold out.
    from inventory.models import Card
    from provisioning.models import Instance
    from tests.factories.inventory import CardAllocationFactory

    make_fleet(h100=1, ascend=1)
    for card in Card.objects.filter(node__accelerator__slug="ascend-910b"):
        CardAllocationFactory(card=card)
    owner = funded(member_factory(role="owner"))
    owner.organization.card_quota = 2
    owner.organization.save(update_fields=["card_quota"])
    page, shot = _create_form(chromium, owner, live_server, "quote-waitlist")
    page.select_option("#id_accelerator", "ascend-910b")
    page.wait_for_selector("#quote-soldout")
    page.check("#id_waitlist")
    page.fill("#id_count", "3")  # over the quota of 2: the quota banner in place of the sold-out one
    page.wait_for_selector("#quote-quota")
    assert page.is_checked("#id_waitlist")
    page.fill("#id_count", "-3")  # invalid: console.js's note replaces the quote
    page.wait_for_selector("#quote-error")
    assert page.is_checked("#id_waitlist")
    page.fill("#id_count", "1")
    page.wait_for_selector("#quote-soldout")
    assert page.is_checked("#id_waitlist")
    shot("still-ticked")
    page.click("#create-submit")
    page.wait_for_selector("#instance-live[data-state=waitlisted]")
    assert Instance.objects.get(organization=owner.organization).waitlist
