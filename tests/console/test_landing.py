"""The landing page: anonymous visitors see the live price and stock per card type and zone, the monthly
price with its discount, the trial, and Sign up as the main button."""
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from inventory.models import Card
from tests.factories.inventory import CardAllocationFactory
from tests.factories.provisioning import make_fleet

pytestmark = pytest.mark.django_db


def _row(page, accelerator, zone):
    return re.search(rf'<tr data-accelerator="{accelerator}" data-zone="{zone}">(.*?)</tr>', page, re.S).group(1)


def test_the_landing_page_shows_live_prices_and_stock_per_card_and_zone(settings):
    settings.TRIAL_CREDIT_UCNY, settings.TRIAL_DAYS = 10_000_000, 30
    make_fleet(zone="east", h100=2)
    make_fleet(zone="west", h100=1, ascend=1)
    for card in Card.objects.filter(node__zone__slug="east")[:3]:
        CardAllocationFactory(card=card)
    for card in Card.objects.filter(node__zone__slug="west", node__accelerator__slug="ascend-910b"):
        CardAllocationFactory(card=card)
    page = Client().get("/").content.decode()
    east = _row(page, "h100-sxm-80g", "east")
    assert 'data-free="13"' in east and "of 16" in east  # live: 3 of 16 cards held
    assert 'data-ucny="1900000">¥1.90' in east and 'data-ucny="1235000">¥1.235' in east and "−35 %" in east
    assert 'data-free="8"' in _row(page, "h100-sxm-80g", "west")
    assert "sold out" in _row(page, "ascend-910b", "west")
    assert "h800" not in page.split('id="price-table"')[1]  # no nodes of it: no row
    assert re.search(r'<a class="button primary" id="signup-cta" href="/signup/">Sign up</a>', page)
    assert "¥10.00 trial credit" in page and "30 days" in page


def test_the_landing_page_runs_the_same_queries_for_any_fleet_and_signed_in_users_go_to_the_dashboard(
        member_factory):
    from tests.factories.tenancy import login_client

    make_fleet(zone="a", h100=1)
    with CaptureQueriesContext(connection) as small:
        Client().get("/")
    make_fleet(zone="b", h100=3, ascend=2, a800=2)
    with CaptureQueriesContext(connection) as large:
        Client().get("/")
    assert len(small.captured_queries) == len(large.captured_queries)
    r = login_client(member_factory(role="owner")).get("/")
    assert r.status_code == 302 and r["Location"] == "/dashboard/"
