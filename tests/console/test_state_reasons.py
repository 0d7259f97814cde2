"""Instance state reasons read as sentences for people on the instance page (console/state_reasons.py): the reasons
provisioning writes are for machines ("create: placed", a quarantined node's hostname, "1778.400000 CNY"); the
API's `state_reason` and events keep them as they are."""
import html

import pytest
from django.utils import timezone

from console.state_reasons import reason_for_people
from provisioning.models import InstanceEvent
from tests.console.conftest import login_client
from tests.factories.provisioning import InstanceFactory

pytestmark = pytest.mark.django_db

FUNDS = "insufficient_funds: Available funds do not cover the monthly package of 1778.400000 CNY. Top up first."
# Every reason provisioning/services writes (instances, steps, waitlist, quarantine, reconciler, retention, packages,
# the billing auto-stop), as the console says it.
CONTAINER_STOPPED = ("Stopped: its cards are released and its container deleted with its disk, so nothing is kept "
                     "(no volume is attached).")
SAID = {
    "create": "Request accepted.",
    "create: placed": "Cards placed; the machine is being prepared.",
    "create: sold out": "Sold out when requested: waiting on the waitlist for cards to free up.",
    "start requested": "Start requested.",
    "start: placed": "Cards placed; the machine is being prepared.",
    "start: sold out": "Sold out when requested: waiting on the waitlist for cards to free up.",
    "woken: capacity freed": "Cards freed up for it on the waitlist; the machine is being prepared.",
    "provisioned": "Machine prepared; its interconnect readiness test is running.",
    "provisioned: warm nodes, boot and image skipped":
        "Taken ready from the warm pool (no boot or image step); its readiness test is running.",
    "readiness passed": "Readiness test passed: handed over to you.",
    "stop requested": "Stop requested.",
    "stopped": CONTAINER_STOPPED,
    "stopped: nothing kept, its container is deleted with its disk (no volume is attached)": CONTAINER_STOPPED,
    "stopped: nothing kept, its nodes are wiped when released":
        "Stopped: its nodes are released and wiped, so nothing on their disks is kept.",
    "terminate requested": "Termination requested.",
    "terminated": "Terminated.",
    "auto-stop: funds_exhausted": "Stopped automatically: the balance ran out.",
    "re-placed: gpu-sh-07 quarantined":
        "A machine failed its readiness test on both attempts; its cards were placed on another machine.",
    "re-placed: gpu-sh-07 failed readiness":
        "A machine failed its readiness test on both attempts; its cards were placed on another machine.",
    "gpu-sh-07: provisioning failed (exit 125)": "The machine could not be prepared, so it was not handed over.",
    "gpu-sh-07: readiness failed twice": "The last machine tried failed its readiness test on both attempts, so it was not handed over.",
    "inter-node readiness failed twice": "The readiness test across its nodes failed on both attempts, so it was not handed over.",
    "reconciler: stuck in provisioning past its step deadline":
        "Preparing the machine took too long, so it was not handed over.",
    "reconciler: stuck in checking past its step deadline": "The readiness test took too long, so it was not handed over.",
    "reconciler: stuck in stopping past its step deadline (released)": "Stopping took too long; its cards were released.",
    "reconciler: stuck in terminating past its step deadline (released)":
        "Terminating took too long; everything it held was released.",
    FUNDS: "Ready, but not handed over: available funds do not cover the monthly package of ¥1,778.40. Top up first.",
    "insufficient_funds: Available funds 5.000000 CNY do not cover 1778.400000 CNY (720 h at 2.470000 CNY/h). "
    "Top up first.": "Ready, but not handed over: available funds ¥5.00 do not cover ¥1,778.40 (720 h at ¥2.47/h). "
                     "Top up first.",
    "waitlist_expired": "No cards freed up within the waitlist's time limit, so the request was ended.",
    "retention_expired": "Stopped for longer than the retention period, so it was terminated.",
    "monthly package ended (renewal: stop)": "The monthly package ended and was not renewed, so it is stopped.",
    "monthly package ended (renewal: on_demand): billed on demand":
        "The monthly package ended; it is billed on demand from now on.",
    # Not known here: passes through, capitalised, money as the console writes it.
    "operator note: moved to 12.500000 CNY/h": "Operator note: moved to ¥12.50/h.",
    "": "",
}


@pytest.mark.parametrize("reason", list(SAID))
def test_each_reason_reads_as_a_sentence(reason):
    assert reason_for_people(reason) == SAID[reason]


def test_instance_page_says_reasons_for_people_and_the_api_keeps_them(owner, session_client_for):
    org = owner.organization
    inst = InstanceFactory(organization=org, state="failed", state_reason=FUNDS, billing="monthly")
    now = timezone.now()
    raw = ["create", "create: placed", "re-placed: gpu-sh-07 quarantined", "provisioned", FUNDS]
    for reason, to in zip(raw, ["pending", "provisioning", "provisioning", "checking", "failed"], strict=True):
        InstanceEvent.objects.create(instance=inst, from_state="", to_state=to, reason=reason, created_at=now)
    page = html.unescape(login_client(owner).get(f"/instances/{inst.pk}/").content.decode())
    said = SAID[FUNDS]
    assert f'id="state-reason">{said}</div>' in page
    assert f"Failed: {said}" in page  # the progress step
    for reason in raw:
        assert f'<td class="small muted">{SAID[reason]}</td>' in page
    for machine_words in ("insufficient_funds", "1778.400000", "CNY", "gpu-sh-07", "create: placed", "provisioned"):
        assert machine_words not in page, machine_words
    api = session_client_for(owner)
    assert api.get(f"/api/v1/instances/{inst.pk}/").json()["state_reason"] == FUNDS
    events = api.get(f"/api/v1/instances/{inst.pk}/events/").json()["results"]
    assert sorted(e["reason"] for e in events) == sorted(raw)


# A bare-metal instance's nodes are wiped when released (a stop too: node cleaning), so it keeps no data disk.
BARE_METAL_SAID = {
    "stopped": "Stopped: its nodes are released and wiped, so nothing on their disks is kept.",
}


@pytest.mark.parametrize("reason", list(SAID))
def test_reasons_read_the_same_for_a_container_and_for_bare_metal_unless_its_disks_matter(reason):
    """Before: a stopped bare-metal instance was said to keep its data disk, though its nodes were wiped; and a
    stopped container too, though its release deletes the container with its disk."""
    assert reason_for_people(reason, "container") == SAID[reason]
    assert reason_for_people(reason, "bare_metal") == BARE_METAL_SAID.get(reason, SAID[reason])


def test_a_stopped_bare_metal_instance_page_does_not_promise_a_kept_disk(owner):
    now = timezone.now()
    client = login_client(owner)
    for kind, said in (("bare_metal", BARE_METAL_SAID["stopped"]), ("container", SAID["stopped"])):
        inst = InstanceFactory(organization=owner.organization, kind=kind, state="stopped", state_reason="stopped")
        InstanceEvent.objects.create(instance=inst, from_state="stopping", to_state="stopped", reason="stopped",
                                     created_at=now)
        page = html.unescape(client.get(f"/instances/{inst.pk}/").content.decode())
        assert f'id="state-reason">{said}</div>' in page, kind
        assert f'<td class="small muted">{said}</td>' in page, kind
        ssh_none = page.split('id="ssh-none">')[1].split("</p>")[0]
        assert "data disk" not in page, kind  # a stop keeps nothing
        assert "Start it to connect again" in ssh_none and ("wiped" in ssh_none) == (kind == "bare_metal"), kind


def test_terminating_asks_about_what_each_kind_loses(owner):
    """The confirmation (the page without JavaScript, htmx's prompt) names a container's data disk, and for bare
    metal the nodes' wiped disks: a bare-metal instance has no data disk apart from its nodes."""
    client = login_client(owner)
    for kind, lost, not_lost in (("container", "container deleted with its disk", "wiped"),
                                 ("bare_metal", "their disks wiped", "data disk")):
        inst = InstanceFactory(organization=owner.organization, kind=kind, state="running")
        confirm = html.unescape(client.get(f"/instances/{inst.pk}/terminate/").content.decode())
        assert lost in confirm and not_lost not in confirm, kind
        page = html.unescape(client.get(f"/instances/{inst.pk}/").content.decode())
        prompt = page.split('hx-confirm="Terminate ')[1].split('"')[0]
        assert lost in prompt and not_lost not in prompt, kind


def test_only_a_role_that_may_start_it_is_told_to_start_a_stopped_instance(owner, member_factory):
    """A viewer sees no Start button, so the connect section does not tell them to start it either."""
    viewer = member_factory(role="viewer", org=owner.organization)
    for state in ("stopped", "stopping"):
        inst = InstanceFactory(organization=owner.organization, kind="container", state=state, state_reason=state)
        for membership, told in ((owner, True), (viewer, False)):
            page = html.unescape(login_client(membership).get(f"/instances/{inst.pk}/").content.decode())
            ssh_none = page.split('id="ssh-none">')[1].split("</p>")[0]
            kept = "container deleted with its disk, so nothing is kept" in ssh_none
            assert (kept, "data disk" in page, "Start it" in ssh_none) == (True, False, told), (state, membership.role)


def test_the_create_form_and_the_low_balance_banner_say_a_stop_keeps_nothing(owner, member_factory):
    """Before: nothing warned that a stop (an auto-stop too) deletes a container with its disk."""
    from tests.factories.billing import MeterFactory, fund

    form = html.unescape(login_client(owner).get("/instances/new/").content.decode())
    said = form.split('id="stop-keeps">')[1].split("</p>")[0]
    assert said.startswith("A stop keeps nothing on the machine itself: a container is deleted with its own disk")
    assert "wiped" in said and "volumes keep their data" in said
    poor = member_factory(role="owner")
    fund(poor.organization, 1_000_000, key="tiny")  # minutes left at ¥19.00/h
    inst = InstanceFactory(organization=poor.organization, state="running")
    MeterFactory(organization=poor.organization, instance_id=inst.pk, cards=10, rate=1_900_000)
    page = html.unescape(login_client(poor).get("/dashboard/").content.decode())
    banner = page.split('id="low-balance-banner"')[1].split("</div>")[0]
    assert "stop automatically when they do, and a stop keeps nothing on their own disks (volumes are kept)" in banner
