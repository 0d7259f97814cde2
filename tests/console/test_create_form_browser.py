"""The create form in headless Chromium: one render submitted from two tabs creates one instance, a
fresh render warns about the name; the price and a Create button stay in view at every scroll position; the
quote says what the organization can afford before Create."""
import re

import pytest

from provisioning.models import Instance
from tests.e2e.conftest import Shots, session_cookie
from tests.factories.provisioning import funded, make_fleet

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
DETAIL = re.compile(r".*/instances/[0-9a-f-]{36}/$")


def _context(chromium, membership, live_server, height=900):
    context = chromium.new_context(viewport={"width": 1280, "height": height})
    context.add_cookies([session_cookie(membership, live_server)])
    return context


def test_one_render_submitted_from_two_tabs_creates_one_instance(e2e_env, live_server, chromium, member_factory):
    make_fleet(h100=2, ascend=1)
    owner = funded(member_factory(role="owner"))
    context = _context(chromium, owner, live_server)
    first = context.new_page()
    first.goto(f"{live_server.url}/instances/new/")
    render = first.content()
    # The second tab shows the very same render (a duplicated tab, a restored session): the same page, same key.
    second = context.new_page()
    second.route(f"{live_server.url}/instances/new/",
                 lambda route: route.fulfill(body=render, content_type="text/html; charset=utf-8")
                 if route.request.method == "GET" else route.continue_())
    second.goto(f"{live_server.url}/instances/new/")
    for page in (first, second):
        page.select_option("#id_accelerator", "h100-sxm-80g")
        page.fill("#id_count", "2")
        page.wait_for_selector("#quote-price[data-ucny='3800000']")
    # Both Create buttons pressed at once: the second request waits for the first and gets its answer.
    first.click("#create-submit", no_wait_after=True)
    second.click("#create-submit", no_wait_after=True)
    first.wait_for_url(DETAIL)
    second.wait_for_url(DETAIL)
    assert first.url == second.url
    instances = list(Instance.objects.filter(organization=owner.organization))
    assert len(instances) == 1 and instances[0].name == "my-instance"
    assert str(instances[0].pk) in first.url
    key = re.search(r'name="idempotency_key" value="([0-9a-f]{32})"', render).group(1)
    shots = Shots(second, "create-two-tabs")
    shots("second-tab")
    # One session for both tabs: the replay's note shows on whichever page loaded after it.
    notes = " ".join(first.locator(".messages").all_inner_texts() + second.locator(".messages").all_inner_texts())
    assert "Nothing was created twice" in notes, notes

    # A fresh render gets a new key and warns that the name is taken; changing the name clears the warning.
    third = context.new_page()
    third.goto(f"{live_server.url}/instances/new/")
    assert third.input_value("input[name=idempotency_key]") != key
    warning = third.inner_text("#quote-name-warning")
    assert "already have an instance named my-instance" in warning
    Shots(third, "create-two-tabs")("name-warning")
    third.fill("#id_name", "my-second-instance")
    third.wait_for_selector("#quote-name-warning", state="detached")
    third.fill("#id_name", "my-instance")
    third.wait_for_selector("#quote-name-warning")


def _in_view(page, selector, height):
    box = page.locator(selector).bounding_box()
    assert box is not None, f"{selector} is not rendered"
    assert box["y"] >= 0 and box["y"] + box["height"] <= height, f"{selector} is off-screen: {box}"


def test_the_price_and_create_stay_in_view_down_to_the_end_of_the_form(e2e_env, live_server, chromium,
                                                                      member_factory):
    make_fleet(h100=2, ascend=1)
    owner = funded(member_factory(role="owner"))
    height = 720
    page = _context(chromium, owner, live_server, height=height).new_page()
    page.goto(f"{live_server.url}/instances/new/")
    page.select_option("#id_accelerator", "h100-sxm-80g")
    page.fill("#id_count", "2")
    page.wait_for_selector("#quote-price[data-ucny='3800000']")
    assert page.evaluate("document.documentElement.scrollHeight") > height * 1.5  # the form does scroll
    shot = Shots(page, "create-scroll")
    for section in ("2 · Machine", "3 · Access", "4 · Billing"):
        page.locator(f"h2:text-is('{section}')").scroll_into_view_if_needed()
        _in_view(page, "#quote-price", height)
        _in_view(page, "#create-submit", height)
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    page.wait_for_timeout(100)
    _in_view(page, "#quote-price", height)
    _in_view(page, "#create-submit", height)
    _in_view(page, "#create-submit-end", height)
    shot("end")
    # An error the quote shows (bare metal takes whole nodes) is in view too, with Create.
    page.check("input[name=kind][value=bare_metal]")
    page.wait_for_selector("#quote-error")
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    page.wait_for_timeout(100)
    assert "multiple of 8" in page.inner_text("#quote-error")
    _in_view(page, "#quote-error", height)
    _in_view(page, "#create-submit", height)
    shot("end-error")
    # The Create at the end of the form creates, like the panel's.
    page.check("input[name=kind][value=container]")
    page.wait_for_selector("#quote-price[data-ucny='3800000']")
    page.click("#create-submit-end")
    page.wait_for_url(DETAIL)
    assert Instance.objects.filter(organization=owner.organization).count() == 1


def test_the_quote_says_there_are_no_funds_before_create(e2e_env, live_server, chromium, member_factory):
    make_fleet(h100=2, ascend=1)
    broke = member_factory(role="owner")  # verified, no trial granted through the factory: ¥0 available
    page = _context(chromium, broke, live_server).new_page()
    page.goto(f"{live_server.url}/instances/new/")
    page.select_option("#id_accelerator", "h100-sxm-80g")
    page.fill("#id_count", "2")
    page.wait_for_selector("#quote-price[data-ucny='3800000']")
    funds = page.inner_text("#quote-funds")
    assert "Not enough funds" in funds and "¥0.00 available" in funds and "Top up first" in funds, funds
    assert "¥0.64" in funds  # 10 minutes of ¥3.80/h, rounded up to the fen
    assert page.query_selector("#quote-available") is None  # no "✓ Available now" for what Create refuses
    assert page.locator("#quote-funds a[href='/billing/topup/']").count() == 1
    Shots(page, "create-no-funds")("quote")
    # Funded, the quote says what the balance covers instead.
    funded(broke, amount=19_000_000)
    page.fill("#id_count", "1")
    page.wait_for_selector("#quote-funds-ok")
    assert page.inner_text("#quote-funds-ok") == "¥19.00 available: about 10 h 0 min at this price."
    assert page.query_selector("#quote-funds") is None
