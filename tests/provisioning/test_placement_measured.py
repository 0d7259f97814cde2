"""Placement prefers the best-measured nodes for bare metal, and the quote (API and console) shows the chosen
node's last measured busbw (PostgreSQL; the reports are written as the readiness steps write them)."""
import pytest
from django.utils import timezone

from provisioning.models import NodeGroup, ReadinessReport
from provisioning.tasks import instance_advance
from tests.console.conftest import login_client
from tests.factories.provisioning import InstanceFactory, container_body, make_fleet

pytestmark = pytest.mark.django_db

QUOTES = "/api/v1/quotes/"


def _measured(node, busbw, *, floor=235.0, scope="intra_node"):
    now = timezone.now()
    return ReadinessReport.objects.create(
        instance=InstanceFactory(), node=node, scope=scope, tool="nccl-tests", cards=list(range(8)),
        busbw_largest_gbps=busbw, busbw_peak_gbps=busbw, floor_gbps=floor, passed=busbw >= floor,
        started_at=now, finished_at=now)


def test_bare_metal_goes_to_the_node_measured_furthest_above_the_floor(client):
    a, b, c = make_fleet(h100=3)
    _measured(a, 470.0)
    _measured(b, 250.0)
    _measured(b, 610.0, scope="second_pass")  # the last run counts
    _measured(c, 300.0)
    body = {**container_body("h100-sxm-80g", 8), "kind": "bare_metal"}
    quote = client.post(QUOTES, body, format="json").json()
    assert quote["available"] and quote["items"][0]["busbw_gbps"] == 610.0
    iid = client.post("/api/v1/instances/", body, format="json").json()["id"]
    assert NodeGroup.objects.get(instance_id=iid).node_id == b.pk
    two = client.post(QUOTES, {**body, "items": [{"accelerator": "h100-sxm-80g", "count": 16}]}, format="json").json()
    assert two["items"][0]["busbw_gbps"] == 300.0  # a and c are left: the lower of the two
    assert instance_advance(iid) == "running"


def test_a_container_quote_shows_its_node_busbw_or_null_before_any_measurement(client, owner):
    (node,) = make_fleet(h100=1)
    quote = client.post(QUOTES, container_body("h100-sxm-80g", 2), format="json").json()
    assert quote["items"][0]["busbw_gbps"] is None
    _measured(node, 388.5)
    quote = client.post(QUOTES, container_body("h100-sxm-80g", 2), format="json").json()
    assert quote["items"][0]["busbw_gbps"] == 388.5
    form = {"name": "train-1", "mode": "items", "kind": "container", "accelerator": "h100-sxm-80g", "count": "2",
            "image_nvidia": "pytorch-2.3-cuda12.3", "image_huawei": "cann-torch-npu", "billing": "on_demand",
            "package_renewal": "stop"}
    page = login_client(owner).post("/instances/quote/", form).content.decode()
    assert 'data-busbw="h100-sxm-80g"' in page and "last measured all_reduce busbw 388.5 GB/s" in page
