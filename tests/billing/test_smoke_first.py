"""The interface other apps call first: funds_check, meters, grants, cash, trial, instance costs."""
import uuid
from datetime import timedelta

import pytest

from billing.ledger import TransferKeyReused
from billing.models import Account, Meter, Transfer
from billing.selectors import instance_costs
from billing.services import (
    cash_credit,
    cash_debit,
    compensation_grant,
    funds_check,
    meter_open,
    meters_close,
    trial_grant,
)
from core.errors import InsufficientFunds
from tests.factories.tenancy import OrganizationFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_first_interface_end_to_end(settings):
    settings.TRIAL_CREDIT_UCNY = 10_000_000
    org = OrganizationFactory()
    t = trial_grant(org=org, user=UserFactory())
    assert t.amount == 10_000_000
    assert trial_grant(org=org, user=None).pk == t.pk
    with pytest.raises(InsufficientFunds):
        funds_check(org=org, price_per_hour=100_000_000)
    funds_check(org=org, price_per_hour=1_900_000)
    c = cash_credit(org=org, amount=5_000_000, key="stripe_pi:x", code="topup", payment_ref="pi_x")
    assert cash_credit(org=org, amount=5_000_000, key="stripe_pi:x", code="topup", payment_ref="pi_x").pk == c.pk
    with pytest.raises(TransferKeyReused):
        cash_credit(org=org, amount=6_000_000, key="stripe_pi:x", code="topup", payment_ref="pi_x")
    cash_debit(org=org, amount=1_000_000, key="stripe_refund:ch:1000000", code="refund")
    g = compensation_grant(org=org, breach_id="b1", amount=300_000)
    assert compensation_grant(org=org, breach_id="b1", amount=300_000).pk == g.pk
    iid = uuid.uuid4()
    m = meter_open(org=org, instance_id=iid, item_index=0, accelerator="h100", cards=2, rate=1_900_000)
    assert meter_open(org=org, instance_id=iid, item_index=0, accelerator="h100", cards=2, rate=1_900_000).pk == m.pk
    Meter.objects.filter(pk=m.pk).update(opened_at=m.opened_at - timedelta(seconds=3600))
    meters_close(instance_id=iid)
    m.refresh_from_db()
    assert m.closed_at is not None
    assert m.posted_amount == 2 * 1_900_000 * m.posted_through_seconds // 3600
    assert instance_costs([iid, uuid.uuid4()])[iid] == m.posted_amount
    assert sum(Account.objects.values_list("balance", flat=True)) == 0
    assert Transfer.objects.filter(key__startswith=f"meter:{m.pk}:").count() >= 1
