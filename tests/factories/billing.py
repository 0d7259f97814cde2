"""Factories and helpers for billing: funded organizations, meters moved into the past."""
from datetime import timedelta

import factory

from billing.models import BillingProfile, Meter
from billing.services import cash_credit
from tests.factories.tenancy import OrganizationFactory


class MeterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Meter

    organization = factory.SubFactory(OrganizationFactory)
    instance_id = factory.Faker("uuid4", cast_to=None)
    item_index = 0
    accelerator = "h100"
    cards = 1
    rate = 1_900_000
    opened_at = factory.LazyFunction(lambda: __import__("core.dbclock", fromlist=["db_now"]).db_now())


def fund(org, amount: int, key: str | None = None):
    """Top up an organization's cash through the real ledger path."""
    return cash_credit(org=org, amount=amount, key=key or f"test-topup:{org.pk}:{amount}:{fund.n}", code="topup",
                       payment_ref="test")


fund.n = 0


def set_credit_limit(org, limit: int) -> BillingProfile:
    """Make an organization postpaid with this credit limit (µCNY)."""
    profile, _ = BillingProfile.objects.get_or_create(organization=org)
    profile.credit_limit = limit
    profile.save(update_fields=["credit_limit"])
    return profile


def backdate_meter(meter: Meter, seconds: int) -> Meter:
    """Move a meter's opening `seconds` into the past, as if it had been running that long."""
    Meter.objects.filter(pk=meter.pk).update(opened_at=meter.opened_at - timedelta(seconds=seconds))
    meter.refresh_from_db()
    return meter
