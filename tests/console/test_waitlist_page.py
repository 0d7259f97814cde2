"""The waitlist page: a waitlisted instance's page shows when its request expires, how long such requests
waited lately, card types or zones free now, and calls cancelling "Leave the waitlist"."""
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from inventory.models import Card
from provisioning.models import Instance, InstanceEvent
from tests.console.conftest import login_client
from tests.factories.inventory import CardAllocationFactory
from tests.factories.provisioning import InstanceFactory, funded, make_fleet

pytestmark = pytest.mark.django_db
H100_4 = [{"accelerator": "h100-sxm-80g", "count": 4, "rate": 1_900_000}]


def _waiting(org, *, zone=None, expires_at=None, items=H100_4):
    now = timezone.now()
    inst = InstanceFactory(organization=org, state="waitlisted", items=items, waitlisted_at=now, zone=zone,
                           expires_at=expires_at or now + timedelta(hours=24), waitlist=True)
    InstanceEvent.objects.create(instance=inst, from_state="", to_state="pending", reason="create", created_at=now)
    InstanceEvent.objects.create(instance=inst, from_state="pending", to_state="waitlisted", reason="create: sold out",
                                 created_at=now)
    return inst


def _woken_after(minutes, items=H100_4):
    """Someone else's request that waited `minutes` before capacity woke it (durations only reach the page)."""
    start = timezone.now() - timedelta(hours=3)
    other = InstanceFactory(state="running", items=items, name="someone-elses")
    InstanceEvent.objects.create(instance=other, from_state="pending", to_state="waitlisted",
                                 reason="create: sold out", created_at=start)
    InstanceEvent.objects.create(instance=other, from_state="waitlisted", to_state="provisioning",
                                 reason="woken: capacity freed", created_at=start + timedelta(minutes=minutes))


def test_a_waitlisted_page_shows_expiry_estimate_alternatives_and_leave_the_waitlist(member_factory):
    make_fleet(zone="east", h100=1)
    west = make_fleet(zone="west", h100=1, a800=1, ascend=1)[0].zone
    for card in Card.objects.filter(node__zone__slug="east"):
        CardAllocationFactory(card=card)  # east's H100s sold out; west has H100, A800 and Ascend free
    owner = funded(member_factory(role="owner"))
    east = Card.objects.filter(node__zone__slug="east").first().node.zone
    expires = timezone.now() + timedelta(hours=20)
    inst = _waiting(owner.organization, zone=east, expires_at=expires)
    for minutes in (20, 40, 90):
        _woken_after(minutes)
    _woken_after(600, items=[{"accelerator": "ascend-910b", "count": 4, "rate": 2_400_000}])  # another card type
    web = login_client(owner)
    page = web.get(f"/instances/{inst.pk}/").content.decode()
    local = expires.astimezone(timezone.get_fixed_timezone(8 * 60))
    assert f'id="waitlist-expiry">Waits until {local:%Y-%m-%d %H:%M} UTC+8, then the request ends' in page
    assert re.search(r'id="waitlist-estimate">Recent requests like this one waited about 40 min \(median of 3 in',
                     page), page
    alternatives = re.search(r'id="waitlist-alternatives">(.*?)</div>', page, re.S).group(1)
    suggested = re.findall(r'data-accelerator="([\w-]+)" data-zone="(\w+)"', alternatives)
    assert suggested == [("h100-sxm-80g", "west"), ("a800-sxm-80g", "west")], suggested  # same card first
    assert "the same card in another zone" in alternatives and "¥7.60/h" in alternatives
    assert "someone-elses" not in page and west.slug == "west"
    # Cancelling is leaving the waitlist, with and without JavaScript.
    assert re.search(r'data-action="terminate">Leave the waitlist</button>', page)
    assert 'hx-confirm="Leave the waitlist with' in page and ">Terminate<" not in page
    confirm = web.get(f"/instances/{inst.pk}/terminate/").content.decode()
    assert f"Leave the waitlist with {inst.name}?" in confirm and "nothing was charged" in confirm
    done = web.post(f"/instances/{inst.pk}/terminate/", follow=True).content.decode()
    assert "You left the waitlist." in done
    assert Instance.objects.get(pk=inst.pk).state in ("terminating", "terminated")


def test_without_history_the_page_says_there_is_no_estimate(member_factory):
    make_fleet(zone="east", h100=1)
    for card in Card.objects.all():
        CardAllocationFactory(card=card)
    owner = funded(member_factory(role="owner"))
    inst = _waiting(owner.organization)
    page = login_client(owner).get(f"/instances/{inst.pk}/").content.decode()
    assert "No estimate yet: no request like this one waited in the last 7 days" in page
    assert 'id="waitlist-alternatives"' not in page  # nothing free anywhere
