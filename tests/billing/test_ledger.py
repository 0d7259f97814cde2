"""Double-entry ledger: immutable transfers, idempotency keys, balance constraints, verification."""
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction
from django.db.utils import DatabaseError

from billing.choices import PLATFORM_IDS, AccountKind
from billing.funds import available_funds, spend
from billing.ledger import Leg, TransferKeyReused, leg_post, org_account_ids, platform_id
from billing.models import Account, Transfer
from billing.services import cash_credit, cash_debit, compensation_grant, trial_grant
from billing.verify import ledger_verify
from tests.factories.billing import fund, set_credit_limit
from tests.factories.tenancy import OrganizationFactory

pytestmark = pytest.mark.django_db


def balances(org):
    return dict(Account.objects.filter(organization=org).values_list("kind", "balance"))


def test_platform_accounts_exist_with_fixed_negative_ids():
    assert dict(Account.objects.filter(organization=None).values_list("kind", "id")) == {
        k.value: v for k, v in PLATFORM_IDS.items()}


def test_same_key_same_fields_returns_original_and_different_fields_are_refused():
    org = OrganizationFactory()
    t1 = cash_credit(org=org, amount=7_000_000, key="stripe_pi:pi_1", code="topup", payment_ref="pi_1")
    t2 = cash_credit(org=org, amount=7_000_000, key="stripe_pi:pi_1", code="topup", payment_ref="pi_1")
    assert t1.pk == t2.pk and Transfer.objects.filter(key="stripe_pi:pi_1").count() == 1
    assert balances(org)["cash"] == 7_000_000
    for changed in ({"amount": 7_000_001}, {"code": "other"}, {"payment_ref": "pi_2"}):
        args = {"org": org, "amount": 7_000_000, "key": "stripe_pi:pi_1", "code": "topup", "payment_ref": "pi_1",
                **changed}
        with pytest.raises(TransferKeyReused):
            cash_credit(**args)
    assert balances(org)["cash"] == 7_000_000
    assert ledger_verify() == []


def test_sign_convention_customer_positive_platform_negative_sum_zero():
    org = OrganizationFactory()
    fund(org, 5_000_000)
    compensation_grant(org=org, breach_id="b-1", amount=1_000_000)
    assert balances(org)["cash"] == 5_000_000
    assert Account.objects.get(pk=platform_id(AccountKind.PAYMENTS_CLEARING)).balance == -5_000_000
    assert Account.objects.get(pk=platform_id(AccountKind.PROMOTIONS)).balance == -1_000_000
    assert sum(Account.objects.values_list("balance", flat=True)) == 0


def test_database_refuses_non_positive_amounts_and_edits_of_transfers():
    org = OrganizationFactory()
    ids = org_account_ids([org.pk])[org.pk]
    with pytest.raises(ValueError):
        leg_post(Leg(key="zero", debit_id=ids["cash"], credit_id=platform_id("rounding"), amount=0, code="x"))
    with pytest.raises(IntegrityError), transaction.atomic():
        Transfer.objects.create(key="raw0", debit_account_id=ids["cash"], credit_account_id=platform_id("rounding"),
                                amount=0, code="x")
    t = fund(org, 1_000_000)
    with pytest.raises(ValueError):
        t.save()
    with pytest.raises(ValueError):
        t.delete()
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic(), connection.cursor() as cur:
        cur.execute("UPDATE billing_transfer SET amount = 1 WHERE id = %s", [t.pk])
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic(), connection.cursor() as cur:
        cur.execute("DELETE FROM billing_transfer WHERE id = %s", [t.pk])


def test_credit_accounts_can_never_go_negative_in_the_database():
    org = OrganizationFactory()
    ids = org_account_ids([org.pk])[org.pk]
    with pytest.raises(IntegrityError), transaction.atomic():
        leg_post(Leg(key="overdraw", debit_id=ids["trial"], credit_id=platform_id("compute_revenue"), amount=1,
                     code="meter"))
    assert not Transfer.objects.filter(key="overdraw").exists()


def test_spend_order_trial_compensation_grant_cash_and_credit_limit(settings):
    settings.TRIAL_CREDIT_UCNY = 1_000_000
    org = OrganizationFactory()
    trial_grant(org=org, user=None)
    compensation_grant(org=org, breach_id="b-2", amount=2_000_000)
    fund(org, 3_000_000)
    set_credit_limit(org, 500_000)
    assert available_funds(org) == 6_500_000
    assert spend(org=org, amount=2_500_000, key="s1", code="meter") == 0
    assert balances(org) == {"trial": 0, "compensation": 500_000, "grant": 0, "cash": 3_000_000}
    assert sorted(Transfer.objects.filter(key__startswith="s1:").values_list("key", "amount")) == [
        ("s1:compensation", 1_500_000), ("s1:trial", 1_000_000)]
    # cash goes down to −credit_limit and no further; the rest is returned uncharged
    assert spend(org=org, amount=5_000_000, key="s2", code="meter") == 1_000_000
    assert balances(org)["cash"] == -500_000 and available_funds(org) == 0
    # a replay posts nothing and reports the same shortfall
    assert spend(org=org, amount=5_000_000, key="s2", code="meter") == 1_000_000
    assert Transfer.objects.filter(key__startswith="s2:").count() == 2
    assert ledger_verify() == []


def test_refund_may_take_cash_below_zero_and_nothing_more_is_spendable():
    org = OrganizationFactory()
    fund(org, 1_000_000)
    cash_debit(org=org, amount=3_000_000, key="stripe_refund:ch_1:3000000", code="refund", payment_ref="ch_1")
    assert balances(org)["cash"] == -2_000_000
    assert available_funds(org) == -2_000_000
    assert spend(org=org, amount=10, key="s3", code="meter") == 10


def test_verify_ledger_command_passes_and_fails_on_any_difference():
    org = OrganizationFactory()
    fund(org, 9_000_000)
    call_command("verify_ledger")
    Account.objects.filter(organization=org, kind="cash").update(balance=9_000_001)
    problems = ledger_verify()
    assert any("balance 9000001 != recomputed 9000000" in p for p in problems)
    assert any("sum to 1" in p for p in problems)
    with pytest.raises(CommandError):
        call_command("verify_ledger")


def test_beat_schedule_registers_ledger_jobs(settings):
    tasks = {v["task"]: v["schedule"] for v in settings.CELERY_BEAT_SCHEDULE.values()}
    assert tasks["billing.meter_tick"] == float(settings.METER_TICK_SECONDS)
    assert "billing.verify_ledger" in tasks and "billing.trial_expiry" in tasks


def test_funds_check_boundary_is_exact_and_hours_selects_a_package(settings):
    from billing.services import funds_check
    from core.errors import InsufficientFunds

    settings.FUNDS_MIN_MINUTES = 10
    org = OrganizationFactory()
    fund(org, 316_666)  # 10 minutes at 1.9 CNY/h is 316,666.67 µCNY
    with pytest.raises(InsufficientFunds) as exc:
        funds_check(org=org, price_per_hour=1_900_000)
    assert exc.value.status == 402 and exc.value.details["required"] == "0.316667"
    fund(org, 1, key="one-more")
    funds_check(org=org, price_per_hour=1_900_000)
    with pytest.raises(InsufficientFunds):
        funds_check(org=org, price_per_hour=1_900_000, hours=720)
