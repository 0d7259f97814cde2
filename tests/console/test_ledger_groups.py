"""The ledger sums metered usage per instance and day with a drill-down to its lines, an SLA credit
names the instance it compensates (linked), and posted charges and live costs are labelled as what they are."""
import re

import pytest
from django.utils import timezone

from billing.credits import compensation_grant
from provisioning.models import InstanceEvent
from tests.console.conftest import login_client
from tests.factories.billing import MeterFactory, meter_spend
from tests.factories.provisioning import InstanceFactory

pytestmark = pytest.mark.django_db


def _ticks(org, inst, n, base):
    meter = MeterFactory(organization=org, instance_id=inst.pk, accelerator="h100-sxm-80g", cards=3)
    for i in range(n):
        meter_spend(org=org, meter=meter, amount=base + i, through=60 * (i + 1), instance_id=inst.pk)
    return meter


def _ledger(client, url="/billing/"):
    return client.get(url).content.decode().split('id="ledger"')[1].split("</table>")[0]


def test_metered_usage_is_one_row_per_instance_and_day_with_its_lines_one_click_away(web, owner):
    org = owner.organization
    train, infer = (InstanceFactory(organization=org, state="running", name=n) for n in ("train", "infer"))
    meter = _ticks(org, train, 24, 1_000)  # 24 postings: one row, not 24
    _ticks(org, infer, 3, 50_000)
    ledger = _ledger(web)
    rows = re.findall(r'<tr class="ledger-line[^"]*"[^>]*data-lines="(\d+)">(.*?)</tr>', ledger, re.S)
    groups = {n: body for n, body in rows}
    assert set(groups) >= {"24", "3"}
    assert len([n for n, _ in rows if n in ("24", "3")]) == 2  # one row each
    total = sum(1_000 + i for i in range(24))
    assert f'data-ucny="{total}"' in groups["24"] and "train" in groups["24"] and "24 postings" in groups["24"]
    today = timezone.now().astimezone(timezone.get_fixed_timezone(8 * 60)).date().isoformat()
    drill = re.search(r'href="(/billing/ledger/[^"]+/)" class="ledger-drill">24 postings', groups["24"]).group(1)
    assert drill == f"/billing/ledger/{train.pk}/{today}/"
    day = web.get(drill).content.decode()
    assert day.count('class="ledger-line"') == 24 and f'id="day-total" data-ucny="{total}"' in day
    assert f'data-meter="{meter.pk}"' in day and "infer" not in day.split("<table")[1]


def test_the_drill_down_answers_404_for_another_organizations_instance_and_a_bad_day(web, owner, member_factory):
    stranger = member_factory(role="owner")
    theirs = InstanceFactory(organization=stranger.organization, state="running", name="theirs")
    _ticks(stranger.organization, theirs, 2, 7_000)
    today = timezone.now().date().isoformat()
    assert web.get(f"/billing/ledger/{theirs.pk}/{today}/").status_code == 404
    mine = InstanceFactory(organization=owner.organization, state="running")
    assert web.get(f"/billing/ledger/{mine.pk}/not-a-day/").status_code == 404
    assert web.get(f"/billing/ledger/{mine.pk}/{today}/").status_code == 200
    viewer = login_client(member_factory(role="viewer", org=owner.organization))  # reads no billing
    assert viewer.get(f"/billing/ledger/{mine.pk}/{today}/").status_code == 404


def test_the_compensation_row_names_its_instance_linked(web, owner):
    org = owner.organization
    late = InstanceFactory(organization=org, state="running", name="late-box")
    created = InstanceEvent.objects.create(instance=late, from_state="", to_state="pending", reason="create",
                                           created_at=timezone.now())
    compensation_grant(org=org, breach_id=str(created.pk), amount=1_900_000)
    ledger = _ledger(web)
    row = next(body for body in re.findall(r'<tr class="ledger-line[^"]*"[^>]*>(.*?)</tr>', ledger, re.S)
               if "SLA compensation" in body)
    assert re.search(rf'for\s*<a href="/instances/{late.pk}/" title="{late.pk}" data-instance="{late.pk}">late-box</a>',
                     row), row
    assert str(created.pk)[:8] not in row  # not the breach event's id, truncated


def test_posted_and_live_amounts_are_labelled(web, owner):
    org = owner.organization
    inst = InstanceFactory(organization=org, state="running", name="box")
    _ticks(org, inst, 2, 1_000)
    page = web.get("/billing/").content.decode()
    assert 'id="ledger-note">Posted charges' in page and '<th class="num">Posted</th>' in page
    detail = web.get(f"/instances/{inst.pk}/").content.decode()
    assert 'id="cost-live">live<' in detail and "the ledger posts it every minute" in detail
    assert "Cost so far (live)" in web.get("/instances/").content.decode()
