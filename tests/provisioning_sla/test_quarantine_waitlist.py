"""Quarantine and re-placement, waitlist positions and expiry, stopped retention (steps run in this process)."""
from datetime import timedelta

import pytest

from inventory.models import CardAllocation, Node
from provisioning.models import Instance, InstanceEvent, NodeGroup, ReadinessReport
from provisioning.services.fleet import fault_force
from provisioning.services.retention import instances_expire_due
from provisioning.tasks import instance_advance
from tenancy.models import AuditEvent
from tests.factories.provisioning import container_body, make_fleet

from .helpers import HOUR, URL, leaks, move, retests_run, set_ago

pytestmark = pytest.mark.django_db


def _create(client, slug="h100-sxm-80g", count=8, **extra) -> dict:
    r = client.post(URL, container_body(slug, count, **extra), format="json")
    assert r.status_code in (201, 202), r.json()
    return r.json()


def _node_of(iid) -> Node:
    return NodeGroup.objects.select_related("node").get(instance_id=iid, released_at__isnull=True).node


def test_second_readiness_failure_quarantines_the_node_and_replaces_the_group(client):
    make_fleet(h100=2)
    iid = _create(client)["id"]
    bad = _node_of(iid)
    fault_force(node=bad, operation="readiness", faults=["data_errors"])
    assert instance_advance(iid) == "running"
    assert retests_run() == ["failed"]  # its second pass on release fails too
    bad.refresh_from_db()
    assert bad.state == "quarantined"
    assert str(iid) in bad.state_reason and "second pass failed" in bad.state_reason
    assert "data_errors" in bad.state_reason  # the test's errors, for operators
    inst = Instance.objects.get(pk=iid)
    assert inst.replacements == 1
    good = _node_of(iid)
    assert good.pk != bad.pk
    assert not CardAllocation.objects.filter(card__node=bad, released_at__isnull=True).exists()
    assert CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True, card__node=good).count() == 8
    assert list(ReadinessReport.objects.filter(instance_id=iid).order_by("id").values_list("node_id", "passed")) == [
        (bad.pk, False), (bad.pk, False), (good.pk, True), (bad.pk, False)]  # the last: its second pass
    transitions = list(InstanceEvent.objects.filter(instance_id=iid).values_list("from_state", "to_state"))
    assert ("checking", "provisioning") in transitions and transitions[-1] == ("checking", "running")
    assert AuditEvent.objects.filter(action="node.quarantined", target_id=str(bad.pk)).exists()
    assert AuditEvent.objects.filter(action="instance.replace", target_id=str(iid)).exists()
    body = client.get(f"{URL}{iid}/").json()
    assert [n["node"] for n in body["nodes"]] == [good.hostname]


def test_three_failing_nodes_end_in_failed_after_two_replacements(client):
    nodes = make_fleet(h100=4)
    for node in nodes[:3]:
        fault_force(node=node, operation="readiness", faults=["low_bandwidth"])
    Node.objects.filter(pk=nodes[3].pk).update(state="maintenance")  # only three candidates
    iid = _create(client, count=4)["id"]
    assert instance_advance(iid) == "failed"  # one task: fail → re-place → fail → re-place → fail
    assert retests_run() == ["failed"] * 3
    inst = Instance.objects.get(pk=iid)
    assert inst.replacements == 2
    assert sorted(Node.objects.filter(pk__in=[n.pk for n in nodes[:3]]).values_list("state", flat=True)) == [
        "quarantined"] * 3
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()
    assert not NodeGroup.objects.filter(instance_id=iid, released_at__isnull=True).exists()
    assert leaks() == {"cards": [], "meters": []}


def test_no_replacement_once_the_sla_window_has_closed(client):
    make_fleet(h100=2)
    iid = _create(client)["id"]
    bad = _node_of(iid)
    fault_force(node=bad, operation="readiness", faults=["nccl_error"])
    set_ago(iid, sla_deadline=timedelta(seconds=1))
    assert instance_advance(iid) == "failed"
    assert retests_run() == ["failed"]
    bad.refresh_from_db()
    assert bad.state == "quarantined"  # quarantined anyway, for operators
    assert Instance.objects.get(pk=iid).replacements == 0


def test_boot_failure_fails_without_quarantine(client):
    make_fleet(h100=2)
    iid = _create(client)["id"]
    bad = _node_of(iid)
    fault_force(node=bad, operation="prepare", faults=["boot_failure"])
    assert instance_advance(iid) == "failed"
    bad.refresh_from_db()
    assert bad.state == "available"  # a boot failure may be the image's fault: the node stays in service


def test_waitlist_positions_for_two_shapes_at_once(client, owner):
    owner.organization.card_quota = 100
    owner.organization.save(update_fields=["card_quota"])
    make_fleet(h100=1, ascend=1)
    _create(client, "h100-sxm-80g", 8)
    _create(client, "ascend-910b", 8)
    queue = [_create(client, slug, n, waitlist=True) for slug, n in [
        ("h100-sxm-80g", 8), ("ascend-910b", 8), ("h100-sxm-80g", 8), ("h100-sxm-80g", 4), ("ascend-910b", 8)]]
    assert all(q["state"] == "waitlisted" for q in queue)
    listed = {row["id"]: row["waitlist_position"] for row in client.get(URL).json()["results"]}
    assert [listed[q["id"]] for q in queue] == [1, 1, 2, 1, 2]
    assert client.get(f"{URL}{queue[4]['id']}/").json()["waitlist_position"] == 2


def test_waitlist_expiry_moves_the_stored_deadline_and_terminates(client):
    make_fleet(h100=1)
    _create(client)
    waiting = _create(client, waitlist=True)
    inst = Instance.objects.get(pk=waiting["id"])
    assert inst.expires_at is not None and inst.waitlisted_at is not None
    assert abs((inst.expires_at - inst.waitlisted_at) - 24 * HOUR) < timedelta(seconds=5)
    assert instances_expire_due() == 0  # not yet
    move(inst.pk, expires_at=-25 * HOUR)
    assert instances_expire_due() == 1
    inst.refresh_from_db()
    assert (inst.state, inst.state_reason) == ("terminating", "waitlist_expired")
    assert instance_advance(inst.pk) == "terminated"
    assert AuditEvent.objects.filter(action="instance.waitlist_expired", target_id=str(inst.pk)).exists()


def test_stopped_instance_terminated_after_retention_with_notice(client, owner, mailoutbox, settings,
                                                                django_capture_on_commit_callbacks):
    settings.STOPPED_RETENTION_DAYS = 15
    make_fleet(h100=1)
    iid = _create(client, count=2)["id"]
    instance_advance(iid)
    client.post(f"{URL}{iid}/stop/")
    assert instance_advance(iid) == "stopped"
    inst = Instance.objects.get(pk=iid)
    stopped_at = InstanceEvent.objects.get(instance_id=iid, to_state="stopped").created_at
    assert inst.expires_at == stopped_at + timedelta(days=15)
    assert instances_expire_due() == 0
    move(iid, expires_at=-timedelta(days=15, seconds=1))
    with django_capture_on_commit_callbacks(execute=True):  # the notice email goes out after commit
        assert instances_expire_due() == 1
    assert instance_advance(iid) == "terminated"
    inst.refresh_from_db()
    assert inst.state_reason == "terminated" and inst.expires_at is None
    assert InstanceEvent.objects.filter(instance_id=iid, to_state="terminating", reason="retention_expired").exists()
    assert len(mailoutbox) == 1 and owner.user.email in mailoutbox[0].to
    assert inst.name in mailoutbox[0].subject
    assert AuditEvent.objects.filter(action="instance.retention_expired", target_id=str(iid)).exists()


def test_starting_again_clears_the_retention_deadline(client):
    make_fleet(h100=1)
    iid = _create(client, count=1)["id"]
    instance_advance(iid)
    client.post(f"{URL}{iid}/stop/")
    instance_advance(iid)
    move(iid, expires_at=-timedelta(days=20))
    client.post(f"{URL}{iid}/start/")
    assert Instance.objects.get(pk=iid).expires_at is None
    assert instances_expire_due() == 0


def test_the_retention_notice_frees_no_disk_since_a_stop_kept_none(owner, mailoutbox,
                                                                     django_capture_on_commit_callbacks):
    """Before: the notice said a stopped container's data disk was freed at last, though its stop had deleted the
    container with its disk; a stopped bare-metal instance's nodes were wiped when it stopped."""
    from django.utils import timezone

    from tests.factories.provisioning import InstanceFactory

    for kind in ("container", "bare_metal"):
        InstanceFactory(organization=owner.organization, creator=owner.user, kind=kind, name=f"kept-{kind}",
                        state="stopped", expires_at=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert instances_expire_due() == 2
    bodies = {m.subject.split("instance ")[1].split(" was")[0]: m.body for m in mailoutbox}
    assert "A stop keeps nothing: its container is deleted with its disk (no volume is attached)." \
        in bodies["kept-container"]
    assert "A stop keeps nothing: its nodes are wiped when released." in bodies["kept-bare_metal"]
    assert not any("data disk" in body or "freed" in body for body in bodies.values())
