"""Factories and helpers for billing: funded organizations, meters moved into the past."""
from datetime import timedelta

import factory

from billing.models import BillingProfile, Meter, MeterCharge
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


def meter_spend(*, org, meter, amount: int, through: int, instance_id=None) -> int:
    """One posting of `meter` through second `through` as meter_post records it, at a chosen amount: the spend
    (per-meter transfers `meter:<id>:<through>:<source>`) and its MeterCharge row; returns what was not charged."""
    from django.utils import timezone

    from billing.funds import spend

    uncharged = spend(org=org, amount=amount, key=f"meter:{meter.pk}:{through}", code="meter", meter_id=meter.pk,
                      instance_id=instance_id or meter.instance_id)
    if amount > uncharged:
        MeterCharge.objects.create(meter_id=meter.pk, through_seconds=through, amount=amount - uncharged,
                                   created_at=timezone.now())
    return uncharged
