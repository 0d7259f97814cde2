"""Trial credit (granted once, spent first, expires to the µCNY), SLA compensation once per breach."""
import uuid
from datetime import timedelta

import pytest
from django.db.models.functions import Now

from billing.credits import trial_expire_due
from billing.models import Account, BillingProfile, Transfer
from billing.services import compensation_grant, meter_open, meters_close, trial_grant
from billing.verify import ledger_verify
from core.dbclock import db_now
from tenancy import hooks as tenancy_hooks
from tenancy.models import AuditEvent
from tests.factories.billing import fund
from tests.factories.tenancy import OrganizationFactory, UserFactory

pytestmark = pytest.mark.django_db


def balances(org):
    return dict(Account.objects.filter(organization=org).values_list("kind", "balance"))


def test_trial_grant_is_registered_with_tenancy():
    assert tenancy_hooks._trial_grant_fn is trial_grant


def test_trial_is_granted_once_spent_first_and_expires_to_the_ucny(settings):
    settings.TRIAL_CREDIT_UCNY = 10_000_000
    org = OrganizationFactory()
    user = UserFactory()
    first = trial_grant(org=org, user=user)
    assert trial_grant(org=org, user=user).pk == first.pk  # replay posts once
    assert Transfer.objects.filter(key=f"trial:{org.pk}").count() == 1
    assert AuditEvent.objects.filter(action="billing.trial_grant", organization=org).count() == 1
    fund(org, 5_000_000)
    meter = meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1,
                       rate=1_900_000, opened_at=db_now() - timedelta(hours=1))
    meters_close(instance_id=meter.instance_id, at=meter.opened_at + timedelta(seconds=2345))
    spent = 1_900_000 * 2345 // 3600  # 1,237,638 µCNY
    assert balances(org)["trial"] == 10_000_000 - spent and balances(org)["cash"] == 5_000_000
    assert trial_expire_due() == 0  # not due yet by the database clock
    BillingProfile.objects.filter(pk=org.pk).update(trial_expires_at=Now() - timedelta(seconds=1))
    assert trial_expire_due() == 1
    assert trial_expire_due() == 0  # once
    expiry = Transfer.objects.get(key=f"trial_expiry:{org.pk}")
    assert expiry.amount == 10_000_000 - spent == 8_762_362
    assert balances(org)["trial"] == 0 and balances(org)["cash"] == 5_000_000
    assert Account.objects.get(kind="expired_credit").balance == 8_762_362
    assert ledger_verify() == []


def test_trial_deadline_is_set_from_the_database_clock(settings):
    settings.TRIAL_DAYS = 30
    org = OrganizationFactory()
    trial_grant(org=org, user=None)
    profile = BillingProfile.objects.get(pk=org.pk)
    assert profile.trial_expires_at is not None and profile.trial_expired_at is None
    delta = profile.trial_expires_at - Transfer.objects.get(key=f"trial:{org.pk}").created_at
    assert abs(delta - timedelta(days=30)) < timedelta(seconds=5)


def test_fully_spent_trial_expires_without_a_transfer(settings):
    settings.TRIAL_CREDIT_UCNY = 1_000
    org = OrganizationFactory()
    trial_grant(org=org, user=None)
    meter = meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1,
                       rate=3_600_000, opened_at=db_now() - timedelta(hours=1))
    meters_close(instance_id=meter.instance_id, at=meter.opened_at + timedelta(seconds=10))
    BillingProfile.objects.filter(pk=org.pk).update(trial_expires_at=Now())
    assert trial_expire_due() == 1
    assert not Transfer.objects.filter(key=f"trial_expiry:{org.pk}").exists()
    assert BillingProfile.objects.get(pk=org.pk).trial_expired_at is not None


def test_compensation_is_granted_once_per_breach():
    org = OrganizationFactory()
    a = compensation_grant(org=org, breach_id="breach-1", amount=470_000)
    b = compensation_grant(org=org, breach_id="breach-1", amount=470_000)
    compensation_grant(org=org, breach_id="breach-2", amount=30_000)
    assert a.pk == b.pk and a.key == "sla:breach-1" and a.code == "sla"
    assert balances(org)["compensation"] == 500_000
    assert AuditEvent.objects.filter(action="billing.compensation_grant", organization=org).count() == 2
    assert ledger_verify() == []
