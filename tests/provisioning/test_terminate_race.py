"""A terminate landing while the worker is inside a driver call (another worker runs the release).

The release reaches the driver for every group whose prepare was started, but may come before the
container is up, so the provisioning worker must notice the terminate after its driver call: stop what
it started, write nothing over the released group, touch no further group.
"""
from unittest import mock

import pytest

from core.failpoints import FailpointCrash, armed
from inventory.models import CardAllocation, Node
from provisioning.drivers.simulated import SimulatedDriver
from provisioning.models import Instance, NodeGroup, ReadinessReport
from provisioning.services import steps
from provisioning.services.fleet import fault_force
from provisioning.services.instances import instance_terminate
from provisioning.tasks import instance_advance
from tests.factories.provisioning import container_body, make_fleet

pytestmark = pytest.mark.django_db
URL = "/api/v1/instances/"
TWO_ITEMS = {"name": "two", "kind": "container", "image": "pytorch-2.3-cuda12.3",
             "items": [{"accelerator": "h100-sxm-80g", "count": 2}, {"accelerator": "a800-sxm-80g", "count": 2}]}


def _create(client, body) -> str:
    r = client.post(URL, body, format="json")
    assert r.status_code == 201, r.json()
    return r.json()["id"]


def _terminate(owner, iid) -> None:
    """DELETE and its worker's release, run to the end as another worker would."""
    instance_terminate(org=owner.organization, instance_id=iid, actor=owner.user)
    steps.instance_terminate_finish(iid)


def _driver_log(owner, iid, during: str):
    """Patch the simulator so the first `during` call terminates the instance mid-call; returns (patches, log)."""
    log = []
    patches = []
    for name in ("prepare", "topology", "readiness", "release"):
        original = getattr(SimulatedDriver, name)

        def call(self, *args, _name=name, _original=original, **kwargs):
            if _name == during and not any(n == during for n, _ in log):
                log.append(("terminate", None))
                _terminate(owner, iid)
            log.append((_name, args[1] if len(args) > 1 else None))
            return _original(self, *args, **kwargs)

        patches.append(mock.patch.object(SimulatedDriver, name, call))
    return patches, log


def _run(patches, fn, *args):
    for p in patches:
        p.start()
    try:
        return fn(*args)
    finally:
        for p in patches:
            p.stop()


def _assert_released(iid):
    assert Instance.objects.get(pk=iid).state == "terminated"
    assert set(NodeGroup.objects.filter(instance_id=iid).values_list("state", flat=True)) == {"released"}
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()


def test_terminate_during_container_start_stops_the_container(client, owner):
    make_fleet(h100=1)
    iid = _create(client, container_body("h100-sxm-80g", 4))
    group = NodeGroup.objects.get(instance_id=iid)
    patches, log = _driver_log(owner, iid, during="prepare")
    _run(patches, steps.instance_provision, iid)
    # The terminate's release ran before the container was up: the provisioning worker stops it again.
    assert [n for n, _ in log] == ["terminate", "release", "prepare", "release"]
    assert log[1][1] == log[-1][1] == group.card_indices  # the group's own cards: the container, not the node
    _assert_released(iid)
    assert NodeGroup.objects.get(pk=group.pk).prepared_at is None
    assert set(Node.objects.values_list("state", flat=True)) == {"available"}


def test_terminate_during_bare_metal_deploy_powers_the_node_off_for_cleaning(client, owner):
    make_fleet(h100=1)
    iid = _create(client, {**container_body("h100-sxm-80g", 8), "kind": "bare_metal"})
    patches, log = _driver_log(owner, iid, during="prepare")
    _run(patches, steps.instance_provision, iid)
    assert [n for n, _ in log] == ["terminate", "release", "prepare", "release"]
    assert log[1][1] == log[-1][1] == []  # bare metal: power off
    _assert_released(iid)
    assert set(Node.objects.values_list("state", flat=True)) == {"cleaning"}


def test_terminate_between_groups_prepares_no_further_group(client, owner):
    make_fleet(h100=1, a800=1)
    iid = _create(client, TWO_ITEMS)
    prepare = steps.group_prepare

    def then_terminate(instance, group):
        done = prepare(instance, group)
        _terminate(owner, iid)  # lands after the first group's write, before the second group's call
        return done

    with mock.patch.object(steps, "group_prepare", then_terminate):
        steps.instance_provision(iid)
    first, second = NodeGroup.objects.filter(instance_id=iid).order_by("item_index", "id")
    assert first.prepared_at is not None and second.prepare_attempts == 0
    _assert_released(iid)


@pytest.mark.parametrize("faults", [None, ["low_bandwidth"]])
def test_terminate_during_readiness_leaves_the_groups_released(client, owner, faults):
    nodes = make_fleet(h100=1, a800=1)
    if faults:
        fault_force(node=nodes[0], operation="readiness", faults=faults, times=2)
    iid = _create(client, TWO_ITEMS)
    steps.instance_provision(iid)
    assert Instance.objects.get(pk=iid).state == "checking"
    patches, log = _driver_log(owner, iid, during="readiness")
    _run(patches, steps.instance_check, iid)
    # One readiness call (the terminate's release stopped both prepared containers); no second attempt,
    # nothing run on the second group's cards after they were given back, no state written over `released`.
    assert [n for n, _ in log] == ["topology", "terminate", "release", "release", "readiness"]
    _assert_released(iid)
    assert not NodeGroup.objects.filter(instance_id=iid, checked_at__isnull=False).exists()
    assert ReadinessReport.objects.filter(instance_id=iid).count() == 1
    assert set(Node.objects.values_list("state", flat=True)) == {"available"}  # nothing quarantined


def test_uninterrupted_lifecycle_is_unchanged(client):
    make_fleet(h100=1, a800=1)
    iid = _create(client, TWO_ITEMS)
    assert instance_advance(iid) == "running"
    assert set(NodeGroup.objects.filter(instance_id=iid).values_list("state", flat=True)) == {"checked"}


def test_a_worker_that_died_inside_prepare_still_has_its_container_stopped(client, owner):
    make_fleet(h100=1)
    iid = _create(client, container_body("h100-sxm-80g", 4))
    group = NodeGroup.objects.get(instance_id=iid)
    with armed({"provision:after_driver"}), pytest.raises(FailpointCrash):
        steps.instance_provision(iid)  # the container started; the worker died before writing so
    crashed = NodeGroup.objects.get(pk=group.pk)
    assert crashed.prepared_at is None and crashed.prepare_started_at is not None
    patches, log = _driver_log(owner, iid, during="nothing")
    _run(patches, _terminate, owner, iid)
    assert log == [("release", group.card_indices)]  # before: skipped, the container ran on freed cards
    _assert_released(iid)


def test_worker_crashes_inside_prepare_cost_the_customer_no_attempt(client, owner):
    """A redelivery after each crash tries again (a crash is not the node's or the image's fault); the
    reconciler's step deadline bounds a crash loop."""
    make_fleet(h100=1)
    iid = _create(client, container_body("h100-sxm-80g", 4))
    for _ in range(3):
        with armed({"provision:after_driver"}), pytest.raises(FailpointCrash):
            steps.instance_provision(iid)
    assert NodeGroup.objects.get(instance_id=iid).prepare_attempts == 0
    steps.instance_provision(iid)
    assert Instance.objects.get(pk=iid).state == "checking"
