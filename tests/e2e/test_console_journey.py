"""The whole customer journey in headless Chromium against a live server and a real worker process."""
import re
import time

import pytest
from django.core import mail

from billing.models import Meter, MeterCharge
from billing.rating import whole_seconds
from inventory.models import Card
from provisioning.models import Instance
from tenancy.models_realname import RealNameVerification
from tenancy.realname.services import realname_approve
from tests.e2e.conftest import Shots, ready_worker, session_cookie
from tests.factories.inventory import CardAllocationFactory
from tests.factories.provisioning import funded, make_fleet, wait_for_state

pytestmark = [pytest.mark.redis, pytest.mark.browser, pytest.mark.django_db(transaction=True)]
H100_RATE = 1_900_000


def _nav_counter(page):
    navigations = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url) if frame == page.main_frame else None)
    return navigations


@pytest.mark.worker
def test_signup_to_terminate_in_the_browser(e2e_env, live_server, start_worker, browser):
    worker = ready_worker(start_worker)
    make_fleet(h100=2, ascend=1)
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # "Stop …?" and "Terminate …?" confirmations
    shot = Shots(page, "journey")

    # Sign up and verify through the emailed link (locmem outbox: the live server runs in this process).
    page.goto(f"{live_server.url}/signup/")
    page.fill("#id_name", "Ada")
    page.fill("#id_email", "ada@example.com")
    page.fill("#id_password1", "correct-horse-battery-9")
    shot("signup")
    page.click("button[type=submit]")
    page.wait_for_url("**/signup/check-email/")
    link = re.search(r"/accounts/confirm-email/[^/\s]+/", mail.outbox[-1].body).group(0)
    page.goto(f"{live_server.url}{link}")
    shot("verified")
    page.goto(f"{live_server.url}/dashboard/")
    assert page.inner_text("#balance-trial") == "¥10.00"
    assert page.inner_text("#balance-available") == "¥10.00"
    shot("dashboard-trial")

    # A new organization may not rent H100s before its real-name verification: the form says so and links it.
    page.goto(f"{live_server.url}/instances/new/")
    assert "need real-name verification" in page.inner_text("#realname-banner")
    page.click("#realname-banner a")
    page.wait_for_url("**/account/verification/")
    page.check("input[name=kind][value=individual]")
    page.fill("#id_legal_name", "Ada Lovelace")
    page.fill("#id_id_number", "11010519491231002X")
    page.click("#realname-form button[type=submit]")
    page.wait_for_selector("[data-realname-state=pending]")
    assert "1101**********002X" in page.inner_text("table")
    shot("verification-pending")
    # The operator approves it in the admin (tests/tenancy/test_realname.py drives that page).
    realname_approve(verification_id=RealNameVerification.objects.get(legal_name="Ada Lovelace").pk, actor=None)
    page.reload()
    page.wait_for_selector("[data-realname-state=verified]")

    # Create 2 × H100: the quote updates in place (htmx), without a page load.
    page.goto(f"{live_server.url}/instances/new/")
    navigations = _nav_counter(page)
    page.select_option("#id_accelerator", "h100-sxm-80g")
    page.fill("#id_count", "2")
    page.wait_for_selector("#quote-price[data-ucny='3800000']")
    assert page.inner_text("#quote-price") == "¥3.80" and "NVLink" in page.inner_text("#quote")
    assert navigations == []
    shot("quote")
    page.click("#create-submit")
    page.wait_for_url(re.compile(r".*/instances/[0-9a-f-]{36}/$"))
    iid = page.url.rstrip("/").rsplit("/", 1)[-1]
    page.wait_for_load_state()
    navigations.clear()

    # Watch it reach running with zero navigations (htmx polling every 2 s).
    shot("provisioning")
    page.wait_for_selector("#instance-live[data-state=running]", timeout=90_000)
    assert navigations == [], navigations
    page.wait_for_selector("#readiness .report.passed")
    assert "nccl-tests" in page.inner_text("#readiness") and page.locator("#readiness svg").count() >= 1
    assert "ssh -p" in page.inner_text("#instance-live")
    shot("running")

    time.sleep(2.5)  # a few whole running seconds
    page.click("button[data-action=stop]")
    page.wait_for_selector("#instance-live[data-state=stopped]", timeout=60_000)
    assert navigations == [], navigations
    assert page.locator("#instance-live[hx-trigger]").count() == 0  # polling stopped
    shot("stopped")

    # The meter row: the ledger charged exactly floor(rate × cards × S / 3600) for its S running seconds.
    meter = Meter.objects.get(instance_id=iid)
    seconds = whole_seconds(meter.opened_at, meter.closed_at)
    expected = H100_RATE * 2 * seconds // 3600
    assert seconds >= 2 and meter.posted_amount == expected and meter.written_off_amount == 0
    assert sum(MeterCharge.objects.filter(meter_id=meter.pk).values_list("amount", flat=True)) == expected
    page.goto(f"{live_server.url}/billing/")
    cells = page.locator(f"tr.ledger-line[data-meter='{meter.pk}'] td[data-ucny]")
    assert sum(int(cells.nth(i).get_attribute("data-ucny")) for i in range(cells.count())) == expected
    assert page.locator("#spend-chart svg rect").count() >= 30
    shot("billing")

    page.goto(f"{live_server.url}/instances/{iid}/")
    navigations.clear()
    page.click("button[data-action=terminate]")
    page.wait_for_selector("#instance-live[data-state=terminated]", timeout=60_000)
    assert navigations == []
    shot("terminated")
    wait_for_state(iid, "terminated", worker=worker)


def test_sold_out_request_joins_the_waitlist_and_shows_its_position(e2e_env, live_server, browser,
                                                                      member_factory):
    from provisioning.placement import Item
    from provisioning.services.instances import instance_create
    from provisioning.services.specs import InstanceSpec

    make_fleet(h100=1, ascend=1)
    for card in Card.objects.filter(node__accelerator__slug="ascend-910b"):
        CardAllocationFactory(card=card)
    spec = InstanceSpec(kind="container", items=(Item("ascend-910b", 1),), image="cann-torch-npu")
    first = funded(member_factory(role="owner"))
    instance_create(org=first.organization, actor=first.user, spec=spec, name="ahead", waitlist=True)
    owner = funded(member_factory(role="owner"))
    context = browser.new_context(viewport={"width": 390, "height": 844})  # a phone
    context.add_cookies([session_cookie(owner, live_server)])
    page = context.new_page()
    shot = Shots(page, "waitlist")
    page.goto(f"{live_server.url}/instances/new/")
    page.select_option("#id_accelerator", "ascend-910b")
    page.wait_for_selector("#quote-soldout")
    shot("sold-out")
    page.check("#id_waitlist")
    page.click("#create-submit")
    page.wait_for_selector("#instance-live[data-state=waitlisted]")
    assert page.inner_text("#waitlist-position") == "Position 2 on the waitlist"
    shot("waitlisted")
    inst = Instance.objects.get(organization=owner.organization)
    assert inst.state == "waitlisted" and inst.waitlist


@pytest.mark.worker
def test_without_javascript_create_stop_terminate(e2e_env, live_server, start_worker, browser):
    from tests.factories.tenancy import MembershipFactory

    worker = ready_worker(start_worker)
    make_fleet(h100=1)
    owner = funded(MembershipFactory(role="owner"))
    context = browser.new_context(java_script_enabled=False)
    context.add_cookies([session_cookie(owner, live_server)])
    page = context.new_page()
    shot = Shots(page, "nojs")

    def reload_until(state, timeout=90):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if page.get_attribute("#instance-live", "data-state") == state:
                return
            time.sleep(0.5)
            page.reload()
        raise AssertionError(f"not {state}: {page.get_attribute('#instance-live', 'data-state')}\n"
                             f"{worker.log_tail()}")

    page.goto(f"{live_server.url}/instances/new/")
    page.select_option("#id_accelerator", "h100-sxm-80g")
    page.fill("#id_count", "1")
    page.click("button[name=preview]")  # the <noscript> price update
    assert page.get_attribute("#quote-price", "data-ucny") == "1900000"
    shot("form")
    page.click("#create-submit")
    page.wait_for_url(re.compile(r".*/instances/[0-9a-f-]{36}/$"))
    reload_until("running")
    shot("running")
    detail = page.url
    page.click("button[data-action=stop]")  # without JavaScript: a page that asks first (a stop keeps nothing)
    page.wait_for_selector("#confirm-submit")
    assert "nothing on it is kept" in page.inner_text("#confirm")
    page.click("#confirm-submit")
    page.wait_for_url(detail)
    reload_until("stopped")
    shot("stopped")
    page.click("button[data-action=terminate]")  # without JavaScript: a page that asks first
    page.wait_for_selector("#confirm-submit")
    assert Instance.objects.get(pk=detail.rstrip("/").rsplit("/", 1)[-1]).state == "stopped"  # asking did nothing
    shot("confirm")
    page.click("#confirm-submit")
    page.wait_for_url(detail)
    reload_until("terminated")
    shot("terminated")
    iid = page.url.rstrip("/").rsplit("/", 1)[-1]
    assert Instance.objects.get(pk=iid).state == "terminated"


def test_live_polling_keeps_open_sections_and_an_unsaved_renewal_choice(e2e_env, live_server, browser,
                                                                         member_factory):
    from tests.factories.provisioning import InstanceFactory

    owner = funded(member_factory(role="owner"))
    inst = InstanceFactory(organization=owner.organization, state="provisioning", billing="monthly",
                           package_renewal="renew")
    context = browser.new_context()
    context.add_cookies([session_cookie(owner, live_server)])
    page = context.new_page()
    page.goto(f"{live_server.url}/instances/{inst.pk}/")
    page.wait_for_selector("#instance-live[data-state=provisioning]")
    page.click("details[data-keep=history] summary")
    page.select_option("#package-renewal-choice", "on_demand")
    page.evaluate("window.swaps = 0; document.addEventListener('htmx:afterSettle', () => window.swaps++)")
    for _ in range(75):  # two polls (every 2 s while provisioning); wait_for_function would need unsafe-eval
        if page.evaluate("() => window.swaps") >= 2:
            break
        page.wait_for_timeout(200)
    assert page.evaluate("() => window.swaps") >= 2
    assert page.eval_on_selector("details[data-keep=history]", "el => el.open") is True
    assert page.input_value("#package-renewal-choice") == "on_demand"
    assert Instance.objects.get(pk=inst.pk).package_renewal == "renew"  # nothing saved behind the user's back
    context.close()
