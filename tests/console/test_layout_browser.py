"""Layout in headless Chromium at 1280 px: the spend chart's labels stay inside it and off its bars, and the
admin's node list shows free / allocated / failed / state reason without scrolling."""
import pytest

from tests.e2e.conftest import Shots, session_cookie
from tests.factories.provisioning import InstanceFactory, funded, make_fleet

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _inside(inner, outer, slack=0.5) -> bool:
    return (inner["x"] >= outer["x"] - slack and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + slack
            and inner["y"] >= outer["y"] - slack and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + slack)


def _overlap(a, b) -> bool:
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


def test_the_spend_charts_labels_fit_and_the_max_label_sits_above_the_bars(e2e_env, live_server, chromium,
                                                                          member_factory):
    from tests.factories.billing import MeterFactory, meter_spend

    make_fleet(h100=1)
    owner = funded(member_factory(role="owner"))
    inst = InstanceFactory(organization=owner.organization, state="running")
    meter = MeterFactory(organization=owner.organization, instance_id=inst.pk, accelerator="h100-sxm-80g")
    # Today is the chart's last day and its maximum: the tallest bar stands at the right edge, under "max …/day".
    meter_spend(org=owner.organization, meter=meter, amount=45_600_000, through=60, instance_id=inst.pk)
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies([session_cookie(owner, live_server)])
    page = context.new_page()
    page.goto(f"{live_server.url}/billing/")
    Shots(page, "spend-chart")("chart")
    chart = page.locator("#spend-chart svg").bounding_box()
    labels = page.locator("#spend-chart svg text", has_not_text="max")
    assert labels.count() >= 2
    for i in range(labels.count()):
        box = labels.nth(i).bounding_box()
        assert _inside(box, chart), (labels.nth(i).text_content(), box, chart)  # "12-0" was the last, cut
    maximum = page.locator("#spend-chart svg text", has_text="max").bounding_box()
    assert _inside(maximum, chart)
    bars = page.locator("#spend-chart rect")
    assert bars.count() == 30
    for i in range(bars.count()):
        bar = bars.nth(i).bounding_box()
        if bar["height"]:
            assert not _overlap(maximum, bar), (maximum, bar)


def _operator_page(chromium, live_server, width=1280):
    from django.conf import settings
    from django.test import Client

    from tests.factories.tenancy import UserFactory

    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    context = chromium.new_context(viewport={"width": width, "height": 900})
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": client.cookies[settings.SESSION_COOKIE_NAME]
                          .value, "url": live_server.url}])
    return context.new_page()


def test_the_admin_node_list_shows_card_counts_and_state_reason_at_1280_px(e2e_env, live_server, chromium):
    from inventory.services import node_set_state

    nodes = make_fleet(zone="cn-east-1a-long-zone-slug", h100=2, ascend=1)
    node_set_state(node=nodes[0], state="drain", reason="rack 7 move: waiting for the new top-of-rack switch",
                   actor=None)
    page = _operator_page(chromium, live_server)
    page.goto(f"{live_server.url}/admin/inventory/node/")
    Shots(page, "admin-nodes")("list")
    # Visible without scrolling: inside the viewport and inside the results box (which scrolls what overflows).
    results = page.locator("#changelist .results").bounding_box()
    right = min(page.viewport_size["width"], results["x"] + results["width"])
    for column in ("cards_free", "cards_allocated", "cards_failed", "state_reason"):
        header = page.locator(f"#result_list th.column-{column}").bounding_box()
        assert header is not None, column
        assert header["x"] >= results["x"] and header["x"] + header["width"] <= right, (column, header, right)
    cell = page.locator("#result_list td.field-state_reason", has_text="rack 7").bounding_box()
    assert cell["x"] + cell["width"] <= right, (cell, right)
