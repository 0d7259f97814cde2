"""The warm pool: whole nodes kept deployed and verified; bare-metal creates take them and skip the boot and image
steps; the pool is refilled and stale checks run again before a node counts (steps here, the simulated driver)."""
import re
from datetime import timedelta

import pytest

from core.dbclock import db_now
from inventory.models import Card, CardAllocation, Image, Node
from provisioning.choices import PROVISIONED_WARM
from provisioning.drivers.base import key_fingerprint
from provisioning.models import (
    CardRetest,
    Instance,
    InstanceEvent,
    NodeGroup,
    ReadinessReport,
    WarmNode,
    WarmPool,
)
from provisioning.platform_keys import authorized_keys
from provisioning.services.cleaning import node_clean
from provisioning.services.fleet import fault_force
from provisioning.services.retest import card_retest_run
from provisioning.services.warm_pool import (
    warm_node_prepare,
    warm_node_verify,
    warm_pool_status,
    warm_pools_refill,
)
from provisioning.tasks import instance_advance
from tests.factories.provisioning import container_body, make_fleet
from tests.factories.tenancy import SshKeyFactory

from .helpers import URL

pytestmark = pytest.mark.django_db

IMAGE = "pytorch-2.3-cuda12.3"


def _pool(size=2) -> WarmPool:
    node = Node.objects.select_related("zone", "accelerator").first()
    return WarmPool.objects.create(zone=node.zone, accelerator=node.accelerator, size=size,
                                   image=Image.objects.get(slug=IMAGE))


def _fill() -> list[str]:
    """One beat tick, then the deploy tasks it queued (the worker's part)."""
    warm_pools_refill()
    return [warm_node_prepare(warm_id=pk) for pk in
            WarmNode.objects.filter(state="preparing").values_list("pk", flat=True)]


def _bare(client, count=8, image=IMAGE, **extra) -> str:
    body = {**container_body("h100-sxm-80g", count), "kind": "bare_metal", "image": image, **extra}
    r = client.post(URL, body, format="json")
    assert r.status_code in (201, 202), r.json()
    return r.json()["id"]


def test_a_bare_metal_create_takes_a_warm_node_skips_boot_and_image_and_the_pool_refills(client, owner,
                                                                                         operator_client):
    make_fleet(h100=3)
    pool = _pool(2)
    assert warm_pools_refill()[str(pool.pk)] == "refilling"
    assert _fill() == ["warm", "warm"]
    warm_nodes = set(WarmNode.objects.values_list("node_id", flat=True))
    assert len(warm_nodes) == 2 and warm_pool_status(pool)[0] == 2
    assert CardAllocation.objects.live().filter(holder_kind="warm_pool").count() == 16  # placed nowhere else
    assert ReadinessReport.objects.filter(instance=None, node_id__in=warm_nodes, passed=True).count() == 2
    assert warm_pools_refill()[str(pool.pk)] == "idle"

    key = SshKeyFactory(user=owner.user)
    iid = _bare(client, ssh_key_ids=[str(key.pk)])
    group = NodeGroup.objects.get(instance_id=iid)
    assert group.warm and group.node_id in warm_nodes
    assert instance_advance(iid) == "running"
    group.refresh_from_db()
    assert group.prepare_attempts == 0  # no deploy ran for this instance
    assert "boot and image steps skipped" in group.prepare_output
    # Deployed before its tenant was known: the hand-over installed the instance's keys (the user's and the
    # platform's) on the node, and only then did it go checking.
    keys = authorized_keys(Instance.objects.get(pk=iid))
    assert len(keys) == 2 and keys[0] == key.public_key and group.keys_installed_at is not None
    assert f"2 ssh key(s) of {iid} in /root/.ssh/authorized_keys" in group.prepare_output
    assert all(key_fingerprint(k) in group.prepare_output for k in keys)
    events = list(InstanceEvent.objects.filter(instance_id=iid).order_by("created_at", "id")
                  .values_list("to_state", "reason"))
    assert ("checking", PROVISIONED_WARM) in events and events[-1][0] == "running"
    api_events = [e["reason"] for e in client.get(f"{URL}{iid}/events/").json()["results"]]
    assert PROVISIONED_WARM in api_events
    assert WarmNode.objects.count() == 1 and warm_pool_status(pool)[0] == 1

    assert _fill() == ["warm"]  # the take queued a refill: the third node is deployed and checked
    assert warm_pool_status(pool)[0] == 2
    assert group.node_id not in set(WarmNode.objects.values_list("node_id", flat=True))
    # The operator's views: the admin's pool page and /metrics.
    page = operator_client.get(f"/admin/provisioning/warmpool/{pool.pk}/change/").content.decode()
    text = " ".join(re.sub(r"<[^>]+>", " ", page).split())
    assert "Warm now: 2 of 2" in text and "Oldest check: 0 h 00 min ago" in text and "Refill state: Idle" in text
    metrics = operator_client.get("/metrics").content.decode()
    assert 'cardmix_warm_pool_warm_nodes{accelerator="h100-sxm-80g",zone="zone-a"} 2.0' in metrics
    assert 'cardmix_warm_pool_size{accelerator="h100-sxm-80g",zone="zone-a"} 2.0' in metrics
    assert 'cardmix_warm_pool_check_age_seconds{accelerator="h100-sxm-80g",zone="zone-a"}' in metrics


def test_a_stale_node_is_verified_again_before_it_counts(client):
    make_fleet(h100=2)
    pool = _pool(1)
    _fill()
    warm = WarmNode.objects.get()
    WarmNode.objects.filter(pk=warm.pk).update(verified_at=db_now() - timedelta(hours=25))
    assert warm_pool_status(pool)[0] == 0  # older than WARM_POOL_MAX_AGE_HOURS (24): not warm
    iid = _bare(client)
    assert not NodeGroup.objects.get(instance_id=iid).warm  # a create never takes a stale node: it boots a cold one
    assert warm_pools_refill()[str(pool.pk)] == "refilling"
    warm.refresh_from_db()
    assert warm.state == "verifying"
    assert warm_node_verify(warm_id=warm.pk) == "warm"
    warm.refresh_from_db()
    assert warm_pool_status(pool)[0] == 1 and db_now() - warm.verified_at < timedelta(minutes=1)
    assert ReadinessReport.objects.filter(node=warm.node, instance=None).count() == 2


def test_another_image_boots_cold_and_a_failing_node_leaves_the_pool(client):
    nodes = make_fleet(h100=3)
    pool = _pool(1)
    fault_force(node=nodes[0], operation="prepare", faults=["boot_failure"])
    assert _fill() == ["left"]  # its deploy failed: maintenance, with the reason
    nodes[0].refresh_from_db()
    assert nodes[0].state == "maintenance" and nodes[0].state_reason.startswith("warm pool: deploy failed")
    assert not CardAllocation.objects.live().filter(card__node=nodes[0]).exists()
    fault_force(node=nodes[1], operation="readiness", faults=["low_bandwidth"])
    assert _fill() == ["retest"]  # its check failed: the second pass, like any readiness failure
    nodes[1].refresh_from_db()
    assert nodes[1].state == "quarantined" and nodes[1].state_reason.startswith(
        "second pass pending: warm check failed on warm pool node")
    retest = CardRetest.objects.get(node=nodes[1])
    assert (retest.cause, retest.instance, retest.first_report.passed) == ("warm_check_failed", None, False)
    assert card_retest_run(retest_id=retest.pk) == "failed"  # still slow: quarantined with both reports
    nodes[1].refresh_from_db()
    assert nodes[1].state == "quarantined" and "after the warm pool's check" in nodes[1].state_reason
    assert f"report #{retest.first_report_id}" in nodes[1].state_reason
    assert _fill() == ["warm"]
    assert WarmNode.objects.get().node_id == nodes[2].pk
    # A create asking another image than the pool's boots a cold node: none is free, so it is refused.
    r = client.post(URL, {**container_body("h100-sxm-80g", 8), "kind": "bare_metal", "image": "deepspeed"},
                    format="json")
    assert r.status_code == 409, r.json()
    assert WarmNode.objects.count() == 1
    pool.size = 0
    pool.save()
    warm_pools_refill()  # made smaller: the node is cleaned, then back among the free nodes
    assert not WarmNode.objects.exists() and not CardAllocation.objects.live().filter(holder_kind="warm_pool").exists()
    assert node_clean(node=Node.objects.get(pk=nodes[2].pk)).state == "available"


def test_a_warm_node_taken_out_of_service_leaves_the_pool_and_is_replaced(client):
    nodes = make_fleet(h100=3)
    pool = _pool(2)
    _fill()
    first, second = WarmNode.objects.select_related("node").order_by("node__hostname")
    Node.objects.filter(pk=first.node_id).update(state="draining")  # an operator's drain
    Card.objects.filter(node=second.node, index=5).update(health="degraded")  # a health signal
    assert warm_pool_status(pool)[0] == 1  # the drained one no longer counts
    iid = _bare(client, count=8)
    assert not NodeGroup.objects.get(instance_id=iid).warm  # the degraded card's node is not handed out
    assert _fill() == []  # both let go (cards freed); no whole free node is left to claim
    assert not CardAllocation.objects.live().filter(holder_kind="warm_pool").exists()
    assert not WarmNode.objects.exists()
    pool.refresh_from_db()
    assert pool.refill_state == "short" and pool.refill_note == "2 whole free node(s) missing"
    # It ran the pool's image: cleaned before anything else lands on it, then the operator's drain is back.
    assert Node.objects.get(pk=first.node_id).state == "cleaning"
    assert node_clean(node=Node.objects.get(pk=first.node_id), previous_state="draining").state == "draining"
    node_clean(node=Node.objects.get(pk=second.node_id))
    Node.objects.filter(pk=first.node_id).update(state="available")  # undrained
    assert _fill() == ["warm"] and WarmNode.objects.get().node_id == first.node_id
    assert nodes[2].pk == NodeGroup.objects.get(instance_id=iid).node_id


def test_a_warm_node_failing_its_check_once_passes_its_second_pass_and_serves_the_pool_again(client):
    nodes = make_fleet(h100=1)
    pool = _pool(1)
    fault_force(node=nodes[0], operation="readiness", faults=["data_errors"], times=1)
    assert _fill() == ["retest"]
    assert not WarmNode.objects.exists() and not CardAllocation.objects.live().exists()
    assert set(Card.objects.filter(node=nodes[0]).values_list("health", flat=True)) == {"degraded"}  # held
    assert _fill() == []  # nothing to claim meanwhile: the node waits for its pass
    retest = CardRetest.objects.get(node=nodes[0])
    assert card_retest_run(retest_id=retest.pk) == "passed"
    retest.refresh_from_db()
    assert retest.second_report.passed and retest.second_report.instance is None
    nodes[0].refresh_from_db()
    assert nodes[0].state == "available" and nodes[0].state_reason.startswith("second pass passed")
    assert set(Card.objects.filter(node=nodes[0]).values_list("health", flat=True)) == {"ok"}
    assert _fill() == ["warm"] and warm_pool_status(pool)[0] == 1


def test_a_hand_over_whose_keys_cannot_be_installed_is_placed_again_cold(client):
    nodes = make_fleet(h100=2)
    _pool(1)
    _fill()
    warm = WarmNode.objects.get()
    fault_force(node=warm.node, operation="install_keys", faults=["timeout"])  # its agent never answers
    iid = _bare(client)
    assert NodeGroup.objects.get(instance_id=iid).warm
    # Not handed over keyless: placed again (a fresh task provisions the new group), on the cold node.
    assert instance_advance(iid) == "provisioning"
    assert Instance.objects.get(pk=iid).state_reason == f"re-placed: {warm.node.hostname} failed readiness"
    assert instance_advance(iid) == "running"
    group = NodeGroup.objects.live().get(instance_id=iid)
    assert not group.warm and group.node_id != warm.node_id and group.node_id in {n.pk for n in nodes}
    failed = NodeGroup.objects.get(instance_id=iid, warm=True)
    assert failed.keys_installed_at is None and failed.prepare_exit_code == 124
    assert failed.prepare_output.count("did not answer install_keys") == 2  # tried like a prepare: twice
    assert CardRetest.objects.get(node=warm.node).cause == "readiness_failed"  # the node's second pass
