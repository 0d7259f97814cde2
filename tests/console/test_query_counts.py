"""Every console page runs the same number of SQL queries with 2 and with 50 rows, all relations populated."""
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from provisioning.models import InstanceEvent, NodeGroup, ReadinessReport
from tests.console.conftest import login_client
from tests.factories.billing import MeterFactory, fund
from tests.factories.provisioning import InstanceFactory, funded, make_fleet
from tests.factories.tenancy import ed25519_public_key

pytestmark = pytest.mark.django_db
STATES = ["running", "waitlisted", "stopped", "provisioning", "failed", "terminated"]


def _instance(org, state, node, user, i):
    now = timezone.now()
    inst = InstanceFactory(organization=org, state=state, creator=user, sla_deadline=now + timedelta(minutes=15),
                           waitlisted_at=now if state == "waitlisted" else None,
                           ready_at=now if state == "running" else None)
    created = InstanceEvent.objects.create(instance=inst, from_state="", to_state="pending", reason="create",
                                           created_at=now)
    inst.sla_event_id = created.pk
    inst.save(update_fields=["sla_event_id"])
    if state not in ("waitlisted", "terminated"):
        NodeGroup.objects.create(instance=inst, item_index=0, accelerator="h100-sxm-80g", node=node,
                                 card_indices=[i % 8], card_ids=[])
    if state == "running":
        MeterFactory(organization=org, instance_id=inst.pk, accelerator="h100-sxm-80g", cards=1)
    return inst


def _populate(owner, n, nodes):
    org, user = owner.organization, owner.user
    made = [_instance(org, STATES[i % len(STATES)], nodes[i % len(nodes)], user, i) for i in range(n)]
    for i in range(n):
        fund(org, 1_000_000 + i, key=f"qc:{org.pk}:{i}")
    return made


def _detail_rows(instance, n, node):
    now = timezone.now()
    for i in range(n):
        InstanceEvent.objects.create(instance=instance, from_state="pending", to_state="provisioning",
                                     reason=f"step {i}", created_at=now)
        ReadinessReport.objects.create(instance=instance, node=node, scope="intra_node", tool="nccl-tests",
                                       cards=[0, 1], busbw_largest_gbps=400.0, floor_gbps=235.0, passed=True,
                                       raw_output="# Avg bus bandwidth : 400", started_at=now, finished_at=now)


def _count(client, url) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return len(ctx.captured_queries)


@pytest.fixture
def two_orgs(member_factory):
    nodes = make_fleet(h100=2)
    small, large = funded(member_factory(role="owner")), funded(member_factory(role="owner"))
    for m, n in ((small, 2), (large, 50)):
        from tenancy.models import SshKey

        for k in range(2 if n == 2 else 50):
            SshKey.objects.create(user=m.user, name=f"k{k}", key_type="ssh-ed25519",
                                  public_key=ed25519_public_key(f"k{k}"), fingerprint=f"SHA256:{m.pk}{k}")
    return (small, _populate(small, 2, nodes)), (large, _populate(large, 50, nodes)), nodes


@pytest.mark.parametrize("url", ["/dashboard/", "/instances/", "/instances/?state=running", "/billing/",
                                 "/instances/new/"])
def test_list_pages_do_not_grow_with_rows(two_orgs, url):
    (small, _), (large, _), _ = two_orgs
    _count(login_client(small), url)  # warm: a process's first quote builds its placement index (once)
    a, b = _count(login_client(small), url), _count(login_client(large), url)
    assert a == b, f"{url}: {a} queries for 2 rows, {b} for 50"


def test_instance_detail_does_not_grow_with_events_and_reports(two_orgs):
    (small, small_rows), (large, large_rows), nodes = two_orgs
    few, many = small_rows[0], large_rows[0]  # both running, with groups and open meters
    _detail_rows(few, 2, nodes[0])
    _detail_rows(many, 50, nodes[0])
    for suffix, headers in (("", {}), ("", {"HTTP_HX_REQUEST": "true"})):
        a = _count_h(login_client(small), f"/instances/{few.pk}/{suffix}", headers)
        b = _count_h(login_client(large), f"/instances/{many.pk}/{suffix}", headers)
        assert a == b, f"detail: {a} queries with 2 events/reports, {b} with 50"


def _count_h(client, url, headers) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, **headers)
    assert response.status_code == 200
    return len(ctx.captured_queries)


def test_quote_partial_constant(two_orgs):
    (small, _), (large, _), _ = two_orgs
    body = {"mode": "items", "kind": "container", "accelerator": "h100-sxm-80g", "count": "2",
            "image_nvidia": "pytorch-2.3-cuda12.3", "billing": "on_demand", "name": "x"}
    counts = []
    assert login_client(small).post("/instances/quote/", body).status_code == 200  # warm the placement index
    for m in (small, large):
        client = login_client(m)
        with CaptureQueriesContext(connection) as ctx:
            assert client.post("/instances/quote/", body).status_code == 200
        counts.append(len(ctx.captured_queries))
    assert counts[0] == counts[1]
