"""When a monthly package period ends, the instance goes on demand (metered from the period's end second at
today's on-demand rate) or stops, as its renewal choice says; billing's beat drives it through the hook."""
from datetime import timedelta

import pytest

from billing.models import Meter
from billing.models_products import Package, PackageState
from billing.products.packages import package_renewals_due
from billing.rating import cumulative_charge, whole_seconds
from billing.tick import meter_tick
from core.dbclock import db_now
from provisioning.models import Instance
from provisioning.tasks import instance_advance
from tenancy.models import AuditEvent
from tests.factories.billing import fund
from tests.factories.provisioning import container_body, make_fleet

# transaction=True: the package-end hook runs when the renewal task's transaction commits.
pytestmark = [pytest.mark.django_db(transaction=True)]
URL = "/api/v1/instances/"


@pytest.fixture(autouse=True)
def _rich(owner):
    fund(owner.organization, 10_000_000_000)  # packages of 720 h are charged up front


def running_monthly(client, renewal: str, cards: int = 2) -> Instance:
    r = client.post(URL, container_body("h100-sxm-80g", cards, billing="monthly", package_renewal=renewal),
                    format="json")
    assert r.status_code == 201, r.json()
    assert instance_advance(r.json()["id"]) == "running"
    return Instance.objects.get(pk=r.json()["id"])


def end_period(instance, seconds_ago: int = 90) -> Package:
    """Move the active period's end into the past, as 30 days passing would, and run the beat's task."""
    package = Package.objects.get(instance_id=instance.pk, state=PackageState.ACTIVE)
    Package.objects.filter(pk=package.pk).update(ends_at=db_now() - timedelta(seconds=seconds_ago))
    assert package_renewals_due() == 1
    package.refresh_from_db()
    return package


def test_on_demand_choice_meters_from_the_period_end_at_the_on_demand_rate(client):
    make_fleet(h100=1)
    inst = running_monthly(client, "on_demand")
    assert inst.price_per_hour == 2 * 1_235_000 and not Meter.objects.filter(instance_id=inst.pk).exists()
    package = end_period(inst, seconds_ago=90)
    inst.refresh_from_db()
    assert inst.state == "running" and inst.billing == "on_demand"
    assert [it["rate"] for it in inst.items] == [1_900_000] and inst.price_per_hour == 2 * 1_900_000
    meter = Meter.objects.get(instance_id=inst.pk, closed_at__isnull=True)
    assert meter.opened_at == package.ends_at and (meter.cards, meter.rate) == (2, 1_900_000)
    # The 90 s the beat took to notice are billed: the first tick charges from the period's end.
    now = db_now()
    meter_tick(now=now)
    meter.refresh_from_db()
    assert meter.posted_amount == cumulative_charge(1_900_000, 2, whole_seconds(package.ends_at, now)) >= 95_000
    assert AuditEvent.objects.get(action="instance.package_ended").details["outcome"] == "on_demand"
    # Stop and start later: on demand, never a second package.
    client.post(f"{URL}{inst.pk}/stop/", format="json")
    instance_advance(str(inst.pk))
    client.post(f"{URL}{inst.pk}/start/", format="json")
    assert instance_advance(str(inst.pk)) == "running"
    assert Package.objects.filter(instance_id=inst.pk).count() == 1
    assert Meter.objects.filter(instance_id=inst.pk, closed_at__isnull=True).count() == 1


def test_stop_choice_stops_the_instance_and_charges_nothing_more(client):
    make_fleet(h100=1)
    inst = running_monthly(client, "stop")
    end_period(inst)
    inst.refresh_from_db()
    assert inst.state == "stopping" and inst.billing == "on_demand"
    assert instance_advance(str(inst.pk)) == "stopped"
    assert not Meter.objects.filter(instance_id=inst.pk).exists()


def test_renewal_without_funds_stops_and_renewal_with_funds_keeps_running(client, owner):
    from billing.funds import balances_of, spend

    make_fleet(h100=2)
    renewing = running_monthly(client, "renew", cards=1)
    end_period(renewing)
    renewing.refresh_from_db()
    assert renewing.state == "running" and renewing.billing == "monthly"
    assert Package.objects.filter(instance_id=renewing.pk, state=PackageState.ACTIVE, period=2).exists()

    broke = running_monthly(client, "renew", cards=1)
    available = sum(v for k, v in balances_of(owner.organization).items() if k != "credit_limit" and v > 0)
    spend(org=owner.organization, amount=available, key="drain-the-balance", code="meter")
    end_period(broke)
    broke.refresh_from_db()
    assert broke.state == "stopping" and broke.billing == "on_demand"


def test_the_could_not_renew_email_names_the_instance_and_the_time_in_the_billing_zone(client, owner, mailoutbox,
                                                                                        settings):
    from zoneinfo import ZoneInfo

    from billing.funds import balances_of, spend

    settings.BILLING_TIME_ZONE = "Asia/Kolkata"  # not UTC, and a half-hour offset: the zone must be named
    make_fleet(h100=1)
    r = client.post(URL, container_body(name="gpu-box", billing="monthly", package_renewal="renew"), format="json")
    assert instance_advance(r.json()["id"]) == "running"
    available = sum(v for k, v in balances_of(owner.organization).items() if k != "credit_limit" and v > 0)
    spend(org=owner.organization, amount=available, key="drain-the-balance", code="meter")
    package = end_period(Instance.objects.get(pk=r.json()["id"]))
    (mail,) = [m for m in mailoutbox if "could not renew" in m.subject]
    ends = package.ends_at.astimezone(ZoneInfo("Asia/Kolkata"))
    assert f"instance gpu-box ({r.json()['id']}) ended on {ends:%Y-%m-%d %H:%M} UTC+5:30 and" in mail.body
    assert "being stopped. A stop keeps nothing but the volumes attached" in mail.body


def test_a_stopped_instance_whose_package_ends_starts_on_demand(client):
    make_fleet(h100=1)
    inst = running_monthly(client, "on_demand", cards=1)
    client.post(f"{URL}{inst.pk}/stop/", format="json")
    assert instance_advance(str(inst.pk)) == "stopped"
    end_period(inst)
    inst.refresh_from_db()
    assert inst.state == "stopped" and inst.billing == "on_demand"
    assert not Meter.objects.filter(instance_id=inst.pk).exists()
    assert package_renewals_due() == 0  # once


def test_terminating_a_monthly_instance_never_renews_its_package(client, owner):
    from billing.funds import balances_of

    make_fleet(h100=1)
    inst = running_monthly(client, "renew", cards=1)
    assert client.delete(f"{URL}{inst.pk}/").status_code in (200, 202)
    assert instance_advance(str(inst.pk)) == "terminated"
    package = Package.objects.get(instance_id=inst.pk)
    assert package.state == PackageState.ACTIVE and package.renewal == "stop"  # the period paid for runs out
    before = balances_of(owner.organization)
    end_period(inst)
    assert Package.objects.filter(instance_id=inst.pk).count() == 1  # no second period charged
    assert balances_of(owner.organization) == before
    inst.refresh_from_db()
    assert inst.state == "terminated" and inst.billing == "monthly"
    assert AuditEvent.objects.filter(action="package.renewal_set").count() == 1


def test_the_reconciler_applies_a_package_end_whose_hook_was_lost(client):
    from billing.products import hooks
    from provisioning.apps import _on_package_end
    from provisioning.services.reconciler import reconcile

    make_fleet(h100=1)
    inst = running_monthly(client, "on_demand", cards=1)
    hooks.unregister_package_end(_on_package_end)  # as if the process died between billing's commit and the hook
    try:
        package = end_period(inst)
    finally:
        hooks.register_package_end(_on_package_end)
    inst.refresh_from_db()
    assert inst.billing == "monthly" and not Meter.objects.filter(instance_id=inst.pk).exists()
    assert reconcile()["package_ends"] == 1
    inst.refresh_from_db()
    assert inst.billing == "on_demand"
    assert Meter.objects.get(instance_id=inst.pk, closed_at__isnull=True).opened_at == package.ends_at
    assert reconcile()["package_ends"] == 0  # once
