"""Issue 33, layout in headless Chromium at 1280 px: the spend chart's labels stay inside it and off its bars
(bug 10), and the admin's node list shows free / allocated / failed / state reason without scrolling (bug 11)."""
import pytest

from tests.e2e.conftest import Shots, session_cookie
from tests.factories.provisioning import InstanceFactory, funded, make_fleet

pytestmark = [pytest.mark.pg, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _inside(inner, outer, slack=0.5) -> bool:
    return (inner["x"] >= outer["x"] - slack and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + slack
            and inner["y"] >= outer["y"] - slack and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + slack)


def _overlap(a, b) -> bool:
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


def test_the_spend_charts_labels_fit_and_the_max_label_sits_above_the_bars(e2e_env, live_server, chromium,
                                                                          member_factory):
    from billing.funds import spend
    from tests.factories.billing import MeterFactory

    make_fleet(h100=1)
    owner = funded(member_factory(role="owner"))
    inst = InstanceFactory(organization=owner.organization, state="running")
    meter = MeterFactory(organization=owner.organization, instance_id=inst.pk, accelerator="h100-sxm-80g")
    # Today is the chart's last day and its maximum: the tallest bar stands at the right edge, under "max …/day".
    spend(org=owner.organization, amount=45_600_000, key=f"meter:{meter.pk}:60", code="meter", meter_id=meter.pk,
          instance_id=inst.pk)
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
