"""The dashboard: the balances are one card with the runway, and the trial credit says when it expires."""
import re

import pytest

from billing.credits import trial_expire, trial_grant
from billing.models import BillingProfile
from tests.console.conftest import login_client
from tests.factories.billing import MeterFactory
from tests.factories.provisioning import InstanceFactory, funded

pytestmark = pytest.mark.django_db


def _balance_card(page):
    return re.search(r'<section class="card stat balance-card" id="balances">(.*?)</section>', page, re.S).group(1)


def test_balances_are_one_card_with_the_runway_and_the_trial_expiry(member_factory, fleet, settings):
    settings.TRIAL_CREDIT_UCNY = 10_000_000
    owner = funded(member_factory(role="owner"), amount=19_000_000)
    trial_grant(org=owner.organization)
    expires = BillingProfile.objects.get(pk=owner.organization.pk).trial_expires_at
    inst = InstanceFactory(organization=owner.organization, state="running")
    MeterFactory(organization=owner.organization, instance_id=inst.pk, cards=2, rate=1_900_000)  # ¥3.80/h
    page = login_client(owner).get("/dashboard/").content.decode()
    card = _balance_card(page)
    for kind in ("available", "trial", "compensation", "grant", "cash"):
        assert f'id="balance-{kind}"' in card, kind
    assert page.count('class="card stat') == 1  # not one card per balance
    # ¥29.00 at ¥3.80/h: about 7 h 37 min of runway, told next to the balance.
    runway = re.search(r'id="runway">(.*?)</div>\s*</div>', card, re.S).group(1)
    assert re.search(r"7 h 3[67] min", runway) and "¥3.80" in runway and "until" in runway, runway
    local = expires.astimezone(__import__("zoneinfo").ZoneInfo(settings.BILLING_TIME_ZONE))
    assert f'id="trial-expiry">expires {local:%Y-%m-%d %H:%M} UTC+8<' in card


def test_no_trial_date_once_it_expired(member_factory, fleet, settings):
    settings.TRIAL_CREDIT_UCNY = 10_000_000
    owner = funded(member_factory(role="owner"))
    trial_grant(org=owner.organization)
    trial_expire(org=owner.organization)
    card = _balance_card(login_client(owner).get("/dashboard/").content.decode())
    assert 'id="trial-expiry"' not in card and "nothing is running" in card
