"""A monthly package is charged when the instance first enters running. Funds that were there at create but
were spent by then (other instances, a refund) fail the instance at once, cards freed, with no SLA
compensation: before, the refused charge rolled the step back, readiness ran again until the reconciler
failed the instance, and the SLA then paid an hour at the monthly rate for a hand-over the funds had stopped."""
import pytest

from billing.credits import cash_debit
from billing.models import Transfer
from billing.models_products import Package
from inventory.models import CardAllocation
from provisioning.models import Instance
from provisioning.services.sla import sla_settle
from provisioning.tasks import instance_advance
from tests.factories.billing import fund
from tests.factories.provisioning import container_body, make_fleet

pytestmark = pytest.mark.django_db


def test_a_package_the_funds_no_longer_cover_fails_the_instance_without_compensation(client, owner):
    make_fleet(h100=1)
    fund(owner.organization, 2_000_000_000)
    r = client.post("/api/v1/instances/", container_body("h100-sxm-80g", 2, billing="monthly"), format="json")
    assert r.status_code == 201, r.json()  # 1,778.40 CNY for the package: covered now
    iid = r.json()["id"]
    cash_debit(org=owner.organization, amount=2_900_000_000, key="test-refund", code="refund")  # spent meanwhile
    assert instance_advance(iid) == "failed"
    inst = Instance.objects.get(pk=iid)
    assert inst.state_reason.startswith("insufficient_funds: ") and inst.ready_at is None
    assert not CardAllocation.objects.filter(holder_id=iid, released_at__isnull=True).exists()
    assert not Package.objects.filter(instance_id=iid).exists()
    assert sla_settle(instance_id=iid) == 0  # its funds, not the platform, ended the hand-over
    assert not Transfer.objects.filter(key__startswith="sla:").exists()
