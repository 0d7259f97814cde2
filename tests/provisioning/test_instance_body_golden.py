"""The exact JSON of the instance list and detail, pinned against a golden file.

The golden file was written by the serializer-per-row implementation before the list got its fast
path (provisioning/api/rows.py); any change to a field name, format or value shows up here.
Regenerate only for an intended API change: CARDMIX_WRITE_GOLDEN=1 bin/test <this file>.
"""
import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from billing.models import Meter
from billing.models_products import Package
from provisioning.models import Instance, NodeGroup
from tests.factories.billing import MeterFactory
from tests.factories.provisioning import InstanceFactory, funded, make_fleet
from tests.factories.tenancy import OrganizationFactory

pytestmark = pytest.mark.django_db
URL = "/api/v1/instances/"
GOLDEN = Path(__file__).parent / "golden" / "instance_bodies.json"


def _id(n: int) -> uuid.UUID:
    return uuid.UUID(f"00000000-0000-4000-8000-{n:012d}")


def _at(day: int, micro: int = 0) -> datetime:
    return datetime(2026, 11, day, 10, 30, 15, micro, tzinfo=UTC)


def _group(inst, node, item_index, cards, state="checked", released=False, ssh_port=None):
    NodeGroup.objects.create(instance=inst, item_index=item_index, accelerator=node.accelerator.slug, node=node,
                             card_indices=cards, card_ids=[], state=state, ssh_port=ssh_port,
                             released_at=_at(2) if released else None)


@pytest.fixture
def owner(member_factory):
    # A fixed organization id: the hybrid's Slurm account (cm- + its first 12 hex digits) is in the bodies.
    org = OrganizationFactory(id=uuid.UUID("5c0ffee0-1234-4abc-8def-000000000001"))
    return funded(member_factory(role="owner", org=org))


@pytest.fixture
def fleet_of_states(owner, settings):
    """Instances in varied states: running on two nodes, waitlisted (items and policy), hybrid, stopped,
    provisioning past and before its SLA deadline, failed; one with a cost, one with SLA compensation."""
    settings.SLURM_SCONTROL = "scontrol"  # a hybrid shows its partition (no command runs for the body)
    h1, h2, asc = make_fleet(h100=2, ascend=1)
    h2.ssh_host, h2.ssh_port = "10.1.2.3", 2222
    h2.save()
    asc.ssh_host = ""  # falls back to the hostname
    asc.save()
    org = owner.organization
    h100 = {"accelerator": "h100-sxm-80g", "count": 2, "rate": 1_900_000}
    made = {}

    def inst(n, day, micro=0, **kw):
        obj = InstanceFactory(id=_id(n), organization=org, name=f"golden-{n}", **kw)
        Instance.objects.filter(pk=obj.pk).update(created_at=_at(day, micro))
        made[n] = obj
        return obj

    running = inst(1, 20, 123456, state="running", items=[{**h100, "count": 4}], price_per_hour=7_600_000,
                   zone=h1.zone, ready_at=_at(21, 500), sla_deadline=_at(21), sla_event_id=_id(901))
    _group(running, h1, 0, [0, 1], ssh_port=30000)
    _group(running, h2, 0, [4, 5], ssh_port=30004)
    _group(running, h1, 0, [6, 7], ssh_port=30006)  # a second container on h1: its own ssh entry and port
    # A container an older agent started on the host network (no published port): the node's sshd, once.
    _group(running, h2, 0, [0, 1])
    _group(running, h2, 0, [6, 7])
    _group(running, h2, 0, [2, 3], state="released", released=True)  # a past placement: not shown
    MeterFactory(organization=org, instance_id=running.pk, posted_amount=1_234_567)
    MeterFactory(organization=org, instance_id=running.pk, item_index=1, posted_amount=3,
                 closed_at=_at(22))
    inst(2, 19, state="waitlisted", items=[h100], price_per_hour=3_800_000, waitlist=True,
         waitlisted_at=_at(19, 1), sla_deadline=None)
    inst(3, 18, state="waitlisted", items=[h100], price_per_hour=3_800_000, waitlist=True,
         waitlisted_at=_at(18, 1))
    inst(4, 17, state="waitlisted", kind="bare_metal", items=[],
         policy={"total_cards": 16, "compatible_vendors": ["nvidia", "huawei"], "min_domestic_share": 0.5},
         image="", images={"nvidia": "pytorch-2.3-cuda12.3", "huawei": "cann-torch-npu"}, price_per_hour=0,
         waitlist=True, waitlisted_at=_at(17))
    hybrid = inst(5, 16, 999999, state="running", kind="bare_metal", zone=h1.zone, image="",
                  items=[{"accelerator": "h100-sxm-80g", "count": 8, "rate": 1_900_000},
                         {"accelerator": "ascend-910b", "count": 8, "rate": 2_400_000}],
                  images={"nvidia": "pytorch-2.3-cuda12.3", "huawei": "cann-torch-npu"},
                  price_per_hour=34_400_000, ready_at=_at(17, 3), sla_deadline=_at(16, 9),
                  sla_event_id=_id(905), sla_settled_event_id=_id(905), sla_compensation=34_400_000)
    _group(hybrid, asc, 1, list(range(8)))
    _group(hybrid, h2, 0, list(range(8)))
    monthly = inst(6, 15, state="stopped", billing="monthly", package_renewal="renew", items=[h100],
                   price_per_hour=2_700_001, ready_at=_at(15, 7), sla_deadline=_at(16), state_reason="stopped by user")
    for period in (1, 2):  # the body shows the latest period
        Package.objects.create(organization=org, instance_id=monthly.pk, period=period, items=[], rate_per_hour=1,
                               amount=720, renewal="renew", state="ended" if period == 1 else "active",
                               starts_at=_at(15, 7) if period == 1 else _at(25, 7), ends_at=_at(25, 7 * period))
    late = inst(7, 14, state="provisioning", items=[h100], price_per_hour=3_800_000, zone=h1.zone,
                sla_deadline=_at(14), sla_event_id=_id(907))
    _group(late, h1, 0, [2, 3], state="placed")
    inst(8, 13, state="provisioning", items=[h100], price_per_hour=3_800_000,
         sla_deadline=datetime(2100, 1, 1, tzinfo=UTC))
    inst(9, 12, state="failed", items=[h100], price_per_hour=3_800_000, sla_deadline=datetime(2100, 1, 1, tzinfo=UTC),
         state_reason="readiness failed twice", sla_event_id=_id(909), sla_settled_event_id=_id(908),
         sla_compensation=5)
    inst(10, 11, state="terminated", items=[h100], price_per_hour=3_800_000, terminated_at=_at(12))
    assert Meter.objects.filter(instance_id=running.pk).count() == 2
    return made


def test_list_and_detail_bodies_match_the_golden_file(client, fleet_of_states):
    cold = client.get(f"{URL}?limit=100")
    bodies = {
        "list": cold.json(),
        "page": client.get(f"{URL}?limit=3&offset=2").json(),
        "filtered": client.get(f"{URL}?state=waitlisted&state=running").json(),
        "detail": {str(_id(n)): client.get(f"{URL}{_id(n)}/").json() for n in sorted(fleet_of_states)},
    }
    if os.environ.get("CARDMIX_WRITE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(bodies, indent=1, ensure_ascii=False) + "\n")
    golden = json.loads(GOLDEN.read_text())
    assert bodies["list"]["count"] == 10 and len(bodies["list"]["results"]) == 10
    for part in ("list", "page", "filtered"):
        assert bodies[part] == golden[part], part
    for key, body in bodies["detail"].items():
        assert body == golden["detail"][key], key
    # Read again, the list writes exactly the same bytes.
    assert client.get(f"{URL}?limit=100").content == cold.content
    # The list row and the detail body of an instance are the same document.
    assert {row["id"]: row for row in bodies["list"]["results"]} == bodies["detail"]
    # Key order is part of the output too (the golden file keeps the order the API wrote).
    for row, pinned in zip(bodies["list"]["results"], golden["list"]["results"], strict=True):
        assert list(row) == list(pinned) and list(row["sla"]) == list(pinned["sla"])
