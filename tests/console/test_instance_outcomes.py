"""What an instance page says once something is over — a failed readiness per node with
sizes in GiB and a Retry beside Terminate, no SSH command while terminating, a stopped instance's steps not all
green, and after a restart only the latest run's readiness reports (with their times)."""
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from provisioning.models import Instance, InstanceEvent, ReadinessReport
from tenancy.models import AuditEvent
from tests.console.conftest import login_client
from tests.factories.provisioning import InstanceFactory, funded

pytestmark = pytest.mark.django_db
BELOW = "below_floor: 180.00 GB/s < 235 GB/s at 8589934592 B"


def _event(inst, frm, to, reason, at):
    return InstanceEvent.objects.create(instance=inst, from_state=frm, to_state=to, reason=reason, created_at=at)


def _report(inst, node, at, *, attempt=1, passed=False, busbw=180.0):
    return ReadinessReport.objects.create(
        instance=inst, node=node, scope="intra_node", tool="nccl-tests", cards=[0, 1], attempt=attempt,
        busbw_largest_gbps=busbw, floor_gbps=235.0, passed=passed, errors=[] if passed else [BELOW],
        raw_output="#", started_at=at, finished_at=at + timedelta(seconds=30))


def _failed_on_three_nodes(org, nodes):
    """A create whose readiness failed twice on each of three machines (two re-placements), then failed."""
    t0 = timezone.now() - timedelta(minutes=20)
    inst = InstanceFactory(organization=org, state="failed", name="train-1",
                           items=[{"accelerator": "h100-sxm-80g", "count": 2, "rate": 1_900_000}],
                           price_per_hour=3_800_000, state_reason=f"{nodes[2].hostname}: readiness failed twice")
    _event(inst, "", "pending", "create", t0)
    _event(inst, "pending", "provisioning", "create: placed", t0 + timedelta(seconds=1))
    for n, node in enumerate(nodes):
        for attempt in (1, 2):
            _report(inst, node, t0 + timedelta(minutes=2 * n + attempt), attempt=attempt)
    _event(inst, "checking", "failed", inst.state_reason, t0 + timedelta(minutes=10))
    return inst


@pytest.fixture
def three_h100(db):
    from tests.factories.provisioning import make_fleet

    return make_fleet(h100=3)


def test_a_failed_readiness_is_told_per_node_in_gib_with_retry_beside_terminate(member_factory, three_h100):
    owner = funded(member_factory(role="owner"))
    inst = _failed_on_three_nodes(owner.organization, three_h100)
    page = login_client(owner).get(f"/instances/{inst.pk}/").content.decode()
    # Six reports from three machines: the page says so per machine, not "failed twice".
    failure = re.search(r'id="readiness-failure">([^<]+)<', page).group(1)
    assert "3 machines (2 attempts each)" in failure, failure
    for node in three_h100:
        assert node.hostname in failure
        assert re.search(rf'data-node="{re.escape(node.hostname)}">.*?failed.*?· 2 attempts</li>', page)
    assert "failed its readiness test twice" not in page
    assert "at 8 GiB" in page and "8589934592" not in page
    # Retry (a new instance with the same request) beside Terminate, and what it does said next to it.
    assert 'data-action="retry"' in page and 'data-action="terminate"' in page
    assert f'action="/instances/{inst.pk}/retry/"' in page and "train-1 (retry)" in page


def test_retry_creates_one_new_instance_with_the_same_request(member_factory, three_h100):
    owner = funded(member_factory(role="owner"))
    inst = _failed_on_three_nodes(owner.organization, three_h100)
    web = login_client(owner)
    r = web.post(f"/instances/{inst.pk}/retry/")
    assert r.status_code == 302
    new = Instance.objects.exclude(pk=inst.pk).get(organization=owner.organization)
    assert r["Location"] == f"/instances/{new.pk}/"
    assert new.name == "train-1 (retry)" and new.kind == inst.kind and new.state == "provisioning"
    assert [(i["accelerator"], i["count"]) for i in new.items] == [("h100-sxm-80g", 2)]
    assert new.images == inst.images and new.billing == inst.billing
    inst.refresh_from_db()
    assert inst.state == "failed"  # the failed one stays until terminated (the table allows nothing else)
    # A second press (another tab) answers the first retry: still one new instance.
    again = web.post(f"/instances/{inst.pk}/retry/")
    assert again["Location"] == f"/instances/{new.pk}/"
    assert Instance.objects.filter(organization=owner.organization).count() == 2
    assert AuditEvent.objects.filter(action="instance.retry", target_id=str(inst.pk)).count() == 1


def test_retry_is_only_for_failed_instances_and_other_tenants_get_404(member_factory, three_h100):
    owner = funded(member_factory(role="owner"))
    running = InstanceFactory(organization=owner.organization, state="running")
    web = login_client(owner)
    r = web.post(f"/instances/{running.pk}/retry/", follow=True)
    assert "Retry refused" in r.content.decode()
    assert Instance.objects.filter(organization=owner.organization).count() == 1
    assert 'data-action="retry"' not in web.get(f"/instances/{running.pk}/").content.decode()
    other = _failed_on_three_nodes(member_factory(role="owner").organization, three_h100)
    assert web.post(f"/instances/{other.pk}/retry/").status_code == 404
    assert Instance.objects.filter(organization=other.organization).count() == 1
    viewer = member_factory(role="viewer", org=owner.organization)
    failed = _failed_on_three_nodes(owner.organization, three_h100)
    assert login_client(viewer).post(f"/instances/{failed.pk}/retry/").status_code == 403
    assert 'data-action="retry"' not in login_client(viewer).get(f"/instances/{failed.pk}/").content.decode()


def _placed(org, node, state):
    from provisioning.models import NodeGroup

    inst = InstanceFactory(organization=org, state=state)
    NodeGroup.objects.create(instance=inst, item_index=0, accelerator="h100-sxm-80g", node=node, card_indices=[0],
                             card_ids=[])
    return inst


def test_no_ssh_command_while_terminating(member_factory, three_h100):
    owner = funded(member_factory(role="owner"))
    web = login_client(owner)
    running = _placed(owner.organization, three_h100[0], "running")
    page = web.get(f"/instances/{running.pk}/").content.decode()
    assert re.search(r"ssh -p \d+ root@", page)
    # The gateway form first: its command and a config block named after the instance (provisioning/gateway/).
    short = str(running.pk)[:8]
    assert f"ssh -p 2222 {short}@127.0.0.1" in page and f"Host {running.name}\n  HostName i-{short}\n" in page
    going = _placed(owner.organization, three_h100[1], "terminating")  # its group is not released yet
    page = web.get(f"/instances/{going.pk}/").content.decode()
    assert not re.search(r"ssh -p \d+ root@", page) and 'data-copy="#ssh-1"' not in page
    assert 'id="ssh-gateway"' not in page
    assert "Terminating: its machine is being torn down" in page


def _ran_and_stopped(org, node, t0):
    inst = InstanceFactory(organization=org, state="stopped")
    for i, (frm, to, reason) in enumerate([("", "pending", "create"), ("pending", "provisioning", "create: placed"),
                                           ("provisioning", "checking", "provisioned"),
                                           ("checking", "running", "readiness passed"),
                                           ("running", "stopping", "stop requested"),
                                           ("stopping", "stopped", "stopped")]):
        _event(inst, frm, to, reason, t0 + timedelta(minutes=i))
    _report(inst, node, t0 + timedelta(minutes=2, seconds=5), passed=True, busbw=400.0)
    return inst


def test_a_stopped_instance_does_not_show_every_step_green(member_factory, three_h100):
    owner = funded(member_factory(role="owner"))
    inst = _ran_and_stopped(owner.organization, three_h100[0], timezone.now() - timedelta(hours=1))
    page = login_client(owner).get(f"/instances/{inst.pk}/").content.decode()
    steps = [(status, label.strip()) for status, label in re.findall(
        r'<li class="step (\w+)">.*?</span>([^<]+)<', re.search(r'id="steps">(.*?)</ol>', page, re.S).group(1), re.S)]
    assert steps[-1] == ("done", "Stopped — cards released, billing stopped"), steps
    assert ("done", "Stop requested") in steps
    hand_over = [status for status, label in steps if label.startswith(("Running", "Interconnect", "Cards placed"))]
    assert hand_over and set(hand_over) == {"past"}, steps  # history, not green


def test_after_a_restart_only_the_latest_runs_reports_show_with_their_times(member_factory, three_h100):
    owner = funded(member_factory(role="owner"))
    t0 = timezone.now() - timedelta(hours=2)
    inst = _ran_and_stopped(owner.organization, three_h100[0], t0)
    restart = t0 + timedelta(hours=1)
    for i, (frm, to, reason) in enumerate([("stopped", "starting", "start requested"),
                                           ("starting", "provisioning", "start: placed"),
                                           ("provisioning", "checking", "provisioned"),
                                           ("checking", "running", "readiness passed")]):
        _event(inst, frm, to, reason, restart + timedelta(minutes=i))
    Instance.objects.filter(pk=inst.pk).update(state="running")
    _report(inst, three_h100[0], restart + timedelta(minutes=2, seconds=5), passed=True, busbw=400.0)
    page = login_client(owner).get(f"/instances/{inst.pk}/").content.decode()
    readiness = re.search(r'id="readiness">(.*?)</section>', page, re.S).group(1)
    current = readiness.split('id="earlier-reports"')[0]
    assert current.count('class="report passed"') == 1
    finished = (restart + timedelta(minutes=2, seconds=35)).astimezone(timezone.get_fixed_timezone(8 * 60))
    assert f'report-time">{finished:%Y-%m-%d %H:%M:%S} UTC+8<' in current
    assert "Earlier runs (1 report, before the latest start)" in readiness
