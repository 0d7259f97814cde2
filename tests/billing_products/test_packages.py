"""Monthly packages: charged once per period, renewal paths by moving the stored deadline into the past."""
import threading
import uuid
from datetime import timedelta

import pytest
from django.core import mail
from django.db import connection

from billing.choices import AccountKind, TransferCode
from billing.funds import balances_of
from billing.models import Transfer
from billing.models_products import Package, PackageOutcome, PackageRenewal, PackageState
from billing.products import hooks
from billing.products.packages import (
    package_active,
    package_funds_check,
    package_renewal_set,
    package_renewals_due,
    package_start,
)
from core.errors import InsufficientFunds
from tests.factories.billing import fund
from tests.factories.billing_products import H100, package_amount
from tests.factories.tenancy import MembershipFactory, OrganizationFactory

AMOUNT = package_amount(H100)  # 720 h × 2 cards × 1.235 CNY


@pytest.fixture
def ended():
    """Record package-end hook calls."""
    calls = []

    def hook(*, instance_id, outcome, at):
        calls.append((instance_id, outcome))

    hooks.register_package_end(hook)
    yield calls
    hooks.unregister_package_end(hook)


def _package_transfers(package):
    return list(Transfer.objects.filter(key__startswith=f"package:{package.pk}:"))


def _expire(package):
    Package.objects.filter(pk=package.pk).update(ends_at=package.starts_at - timedelta(seconds=1))


@pytest.mark.django_db
def test_funds_check_needs_the_whole_package():
    org = OrganizationFactory()
    fund(org, AMOUNT - 1)
    with pytest.raises(InsufficientFunds):
        package_funds_check(org=org, monthly_price_per_hour=AMOUNT // 720)
    fund(org, 1, key="one-more")
    package_funds_check(org=org, monthly_price_per_hour=AMOUNT // 720)


@pytest.mark.django_db
def test_start_charges_in_full_once_even_when_called_twice():
    org, instance = OrganizationFactory(), uuid.uuid4()
    fund(org, AMOUNT + 5_000_000)
    first = package_start(org=org, instance_id=instance, items=[H100], renewal=PackageRenewal.RENEW)
    again = package_start(org=org, instance_id=instance, items=[H100], renewal=PackageRenewal.RENEW)
    assert again.pk == first.pk and first.amount == AMOUNT
    assert (first.ends_at - first.starts_at) == timedelta(days=30)
    transfers = _package_transfers(first)
    assert sum(t.amount for t in transfers) == AMOUNT and all(t.code == TransferCode.PACKAGE for t in transfers)
    assert balances_of(org)[AccountKind.CASH] == 5_000_000
    assert package_active(instance) is True and package_active(uuid.uuid4()) is False


@pytest.mark.django_db
def test_start_without_funds_charges_nothing_and_leaves_no_package():
    org, instance = OrganizationFactory(), uuid.uuid4()
    fund(org, AMOUNT - 1)
    with pytest.raises(InsufficientFunds):
        package_start(org=org, instance_id=instance, items=[H100], renewal=PackageRenewal.STOP)
    assert not Package.objects.filter(instance_id=instance).exists()
    assert not Transfer.objects.filter(code=TransferCode.PACKAGE).exists()
    assert balances_of(org)[AccountKind.CASH] == AMOUNT - 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_running_transitions_charge_once():
    org, instance = OrganizationFactory(), uuid.uuid4()
    fund(org, 3 * AMOUNT)
    barrier, results, errors = threading.Barrier(2), [], []

    def run():
        try:
            barrier.wait()
            results.append(package_start(org=org.pk, instance_id=instance, items=[H100], renewal="stop").pk)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(results) == 2 and results[0] == results[1]
    assert Package.objects.filter(instance_id=instance).count() == 1
    assert sum(t.amount for t in Transfer.objects.filter(code=TransferCode.PACKAGE)) == AMOUNT
    assert balances_of(org)[AccountKind.CASH] == 2 * AMOUNT


@pytest.mark.django_db
def test_renew_with_funds_charges_the_next_period(ended):
    org, instance = OrganizationFactory(), uuid.uuid4()
    fund(org, 2 * AMOUNT)
    first = package_start(org=org, instance_id=instance, items=[H100], renewal=PackageRenewal.RENEW)
    assert package_renewals_due() == 0  # not due yet
    _expire(first)
    assert package_renewals_due() == 1
    first.refresh_from_db()
    second = Package.objects.get(instance_id=instance, period=2)
    assert first.state == PackageState.ENDED and first.outcome == PackageOutcome.RENEWED
    assert second.state == PackageState.ACTIVE and second.starts_at == first.ends_at
    assert sum(t.amount for t in _package_transfers(second)) == AMOUNT
    assert balances_of(org)[AccountKind.CASH] == 0
    assert package_active(instance)
    assert package_renewals_due() == 0  # ran once


@pytest.mark.django_db(transaction=True)
def test_renew_without_funds_falls_back_to_stop_with_notice(ended):
    owner = MembershipFactory(role="owner")
    org, instance = owner.organization, uuid.uuid4()
    fund(org, AMOUNT + AMOUNT // 2)
    first = package_start(org=org, instance_id=instance, items=[H100], renewal=PackageRenewal.RENEW)
    _expire(first)
    assert package_renewals_due() == 1
    first.refresh_from_db()
    assert first.state == PackageState.ENDED and first.outcome == PackageOutcome.STOP and "insufficient" in first.notice
    assert not Package.objects.filter(instance_id=instance, period=2).exists()
    assert not Transfer.objects.filter(code=TransferCode.PACKAGE).exclude(key__startswith=f"package:{first.pk}:").exists()
    assert balances_of(org)[AccountKind.CASH] == AMOUNT // 2
    assert ended == [(instance, "stop")]
    assert not package_active(instance)
    assert [m.to for m in mail.outbox] == [[owner.user.email]]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("renewal,outcome", [(PackageRenewal.ON_DEMAND, "on_demand"), (PackageRenewal.STOP, "stop")])
def test_on_demand_and_stop_end_the_package_and_tell_provisioning(ended, renewal, outcome):
    org, instance = OrganizationFactory(), uuid.uuid4()
    fund(org, 2 * AMOUNT)
    first = package_start(org=org, instance_id=instance, items=[H100], renewal=renewal)
    _expire(first)
    assert package_renewals_due() == 1
    first.refresh_from_db()
    assert first.state == PackageState.ENDED and first.outcome == outcome
    assert ended == [(instance, outcome)]
    assert not package_active(instance)
    assert Transfer.objects.filter(code=TransferCode.PACKAGE).count() >= 1
    assert balances_of(org)[AccountKind.CASH] == AMOUNT  # nothing more charged, nothing refunded
    assert package_renewals_due() == 0 and len(ended) == 1


@pytest.mark.django_db
def test_renewal_choice_can_change_before_the_end(ended):
    org, instance = OrganizationFactory(), uuid.uuid4()
    fund(org, 2 * AMOUNT)
    first = package_start(org=org, instance_id=instance, items=[H100], renewal=PackageRenewal.RENEW)
    package_renewal_set(org=org, instance_id=instance, renewal=PackageRenewal.STOP)
    _expire(first)
    package_renewals_due()
    first.refresh_from_db()
    assert first.outcome == PackageOutcome.STOP
    assert balances_of(org)[AccountKind.CASH] == AMOUNT
