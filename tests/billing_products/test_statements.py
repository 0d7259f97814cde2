"""Statements: lines add up exactly to the month's transfers, the CSV parses back, a past month is stable."""
import csv
import io
import uuid
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db.models import Q, Sum

from billing.choices import AccountKind, TransferCode
from billing.credits import cash_credit, trial_grant
from billing.ledger import platform_id
from billing.metering import meter_post_now
from billing.models import Account, Transfer, WriteOff
from billing.products.packages import package_start
from billing.products.statement_formats import statement_csv
from billing.products.statements import month_bounds, statement_build
from core.money import parse_cny
from tests.factories.billing import MeterFactory
from tests.factories.billing_products import H100, package_amount, posted_at
from tests.factories.tenancy import OrganizationFactory

pytestmark = pytest.mark.django_db
TZ = ZoneInfo("Asia/Shanghai")


def _february(org):
    """A month of activity: trial, top-up, two meters (one running out of funds), a package."""
    with posted_at(datetime(2025, 2, 1, 0, 0, 5, tzinfo=TZ)):  # Feb 1 in Shanghai = Jan 31 UTC
        trial_grant(org=org)
        cash_credit(org=org, amount=package_amount(H100), key=f"stripe_pi:{org.pk}", code="topup",
                    payment_ref="pi_1")
    with posted_at(datetime(2025, 2, 3, 12, tzinfo=TZ)):
        package_start(org=org, instance_id=uuid.uuid4(), items=[H100], renewal="stop")
    a = MeterFactory(organization=org, rate=1_900_000, cards=2)
    b = MeterFactory(organization=org, rate=2_400_000, cards=1, accelerator="ascend-910b")
    for i, second in enumerate((600, 1801, 3600)):
        with posted_at(datetime(2025, 2, 10 + i, tzinfo=TZ)):
            meter_post_now(meter_id=a.pk, now=a.opened_at + timedelta(seconds=second))
            meter_post_now(meter_id=b.pk, now=b.opened_at + timedelta(seconds=second * 3))
    with posted_at(datetime(2025, 3, 1, 0, 0, 1, tzinfo=TZ)):  # March in Shanghai: not in February
        meter_post_now(meter_id=a.pk, now=a.opened_at + timedelta(seconds=7200))
    return a, b


def test_lines_add_up_to_the_months_transfers():
    org = OrganizationFactory()
    a, b = _february(org)
    st = statement_build(org=org, month="2025-02")
    start, end = month_bounds(2025, 2)
    ids = list(Account.objects.filter(organization=org).values_list("pk", flat=True))
    month = Transfer.objects.filter(created_at__gte=start, created_at__lt=end)
    charged = month.filter(debit_account_id__in=ids, credit_account_id=platform_id(AccountKind.COMPUTE_REVENUE))
    total_charged = charged.aggregate(s=Sum("amount"))["s"]
    assert st.totals["charges"] == total_charged == st.totals["credits_used"]
    assert sum(u["amount"] for u in st.usage) == charged.filter(code=TransferCode.METER).aggregate(s=Sum("amount"))["s"]
    assert [p["amount"] for p in st.packages] == [package_amount(H100)]
    assert [u["meter_id"] for u in st.usage] == [a.pk, b.pk]
    line_a = st.usage[0]
    assert line_a["seconds"] == 3600 and line_a["amount"] + line_a["written_off"] == 2 * 1_900_000
    # b ran out of funds: its write-offs are on the statement, in µCNY and seconds.
    wo = WriteOff.objects.filter(meter=b).aggregate(s=Sum("amount"))["s"] or 0
    assert sum(w["amount"] for w in st.write_offs) == st.totals["write_offs"] == wo > 0
    assert st.usage[1]["seconds"] == 10800
    assert st.usage[1]["amount"] + st.usage[1]["written_off"] == 3 * 2_400_000
    # Balances: opening + credits − debits = closing, per account; all of them match the month's transfers.
    touching = month.filter(Q(debit_account_id__in=ids) | Q(credit_account_id__in=ids))
    assert sum(x["credits"] for x in st.accounts) == touching.filter(credit_account_id__in=ids).aggregate(
        s=Sum("amount"))["s"]
    for line in st.accounts:
        assert line["opening"] == 0 and line["closing"] == line["opening"] + line["credits"] - line["debits"]
    assert st.topups[0]["amount"] == package_amount(H100)
    assert st.credits_used[AccountKind.TRIAL] > 0 and st.credits_used[AccountKind.CASH] > 0
    # March's statement opens where February closed.
    march = statement_build(org=org, month="2025-03")
    assert [x["opening"] for x in march.accounts] == [x["closing"] for x in st.accounts]
    assert {x["account"]: x["closing"] for x in march.accounts} == dict(
        Account.objects.filter(organization=org).values_list("kind", "balance"))


def test_csv_parses_back_to_the_same_totals_and_is_stable():
    org = OrganizationFactory()
    _february(org)
    st = statement_build(org=org, month="2025-02")
    body = statement_csv(st)
    rows = list(csv.DictReader(io.StringIO(body.decode())))

    def total(section):
        return sum(parse_cny(r["amount"], allow_negative=True) for r in rows if r["section"] == section)

    assert total("usage") == total("total_usage") == st.totals["usage"]
    assert total("package") == total("total_packages") == st.totals["packages"]
    assert total("credits_used") == total("total_charges") == st.totals["charges"]
    assert total("write_off") == st.totals["write_offs"]
    assert {r["account"]: parse_cny(r["amount"], allow_negative=True) for r in rows
            if r["section"] == "closing_balance"} == {x["account"]: x["closing"] for x in st.accounts}
    # Later activity (today) does not change February, byte for byte.
    cash_credit(org=org, amount=7_000_000, key=f"later:{org.pk}", code="topup")
    assert statement_csv(statement_build(org=org, month="2025-02")) == body


def test_csv_dates_packages_in_the_billing_time_zone_like_every_other_line():
    """A package started at 02:00 on March 1 in Shanghai (Feb 28 in UTC) is dated March 1, as its top-up is."""
    from billing.models_products import Package

    org = OrganizationFactory()
    when = datetime(2025, 3, 1, 2, 0, tzinfo=TZ)
    with posted_at(when):
        cash_credit(org=org, amount=package_amount(H100), key=f"k:{org.pk}", code="topup")
        package = package_start(org=org, instance_id=uuid.uuid4(), items=[H100])
    Package.objects.filter(pk=package.pk).update(starts_at=when)  # starts_at comes from the database clock
    rows = csv.DictReader(io.StringIO(statement_csv(statement_build(org=org, month="2025-03")).decode()))
    dates = {r["section"]: r["date"] for r in rows if r["section"] in ("package", "topup")}
    assert dates == {"package": "2025-03-01", "topup": "2025-03-01"}


def test_month_bounds_refuse_months_they_cannot_represent():
    """9999-12 ends in year 10000, which datetime cannot hold: a validation error, never a 500."""
    from core.errors import ValidationFailed

    assert month_bounds(9999, 11)[1] == datetime(9999, 12, 1, tzinfo=TZ)
    for year, month in ((9999, 12), (1999, 12), (2025, 13)):
        with pytest.raises(ValidationFailed):
            month_bounds(year, month)
