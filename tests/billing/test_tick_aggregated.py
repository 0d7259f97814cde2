"""The tick's aggregated postings (one transfer per organization and source account, the per-meter detail in
MeterCharge) give the same money as posting every meter on its own (meter_post: per-meter transfers, the path the
tick took before, and a meter's close still takes): balances, meters, per-meter charges, write-offs, what each source account
paid, and the monthly statement, to the µCNY, whatever the credits, limits, rates and tick times."""
import uuid
from collections import defaultdict
from datetime import timedelta

import pytest
from django.db import transaction
from django.db.models import Sum
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from billing import tick
from billing.credits import compensation_grant, grant_credit, trial_grant
from billing.metering import meter_post
from billing.models import Account, BillingProfile, Meter, MeterCharge, Transfer, WriteOff
from billing.products.statements import statement_build
from billing.rating import whole_seconds
from billing.services import meter_open
from billing.verify import ledger_verify
from billing.zone import billing_tz
from core.dbclock import db_now
from tests.factories.billing import fund
from tests.factories.tenancy import OrganizationFactory

pytestmark = pytest.mark.django_db


class _Rollback(Exception):
    pass


def _snapshot(orgs, meters) -> dict:
    """Every money figure the two paths must agree on, keyed by what is the same in both worlds."""
    kind_of = dict(Account.objects.values_list("pk", "kind"))
    org_of = dict(Account.objects.values_list("pk", "organization_id"))
    paid = defaultdict(int)  # (organization, source kind) → µCNY its metered transfers took
    for debit, credit, amount in Transfer.objects.filter(code="meter", debit_account__organization__in=orgs).values_list(
            "debit_account_id", "credit_account_id", "amount"):
        paid[(str(org_of[debit]), kind_of[debit], kind_of[credit] in ("compute_revenue", "tick_revenue"))] += amount
    month = db_now().astimezone(billing_tz()).strftime("%Y-%m")
    statements = {}
    for org in orgs:
        st_ = statement_build(org=org, month=month)
        statements[str(org.pk)] = {"usage": st_.usage, "accounts": st_.accounts, "credits_used": st_.credits_used,
                                   "write_offs": st_.write_offs, "totals": st_.totals,
                                   "other_charges": st_.other_charges}
    return {
        "balances": sorted(Account.objects.filter(organization__in=orgs).values_list(
            "organization_id", "kind", "balance")),
        "meters": sorted(Meter.objects.filter(pk__in=meters).values_list(
            "pk", "posted_through_seconds", "posted_amount", "written_off_amount")),
        "charges": sorted(MeterCharge.objects.filter(meter_id__in=meters).values_list(
            "meter_id", "through_seconds", "amount")),
        "write_offs": sorted(WriteOff.objects.filter(meter_id__in=meters).values_list(
            "meter_id", "key", "seconds", "amount")),
        "paid": dict(paid),
        "statements": statements,
        "verify": ledger_verify(),
    }


def _post_each_meter(now) -> None:
    """The reference: every open meter posted on its own through meter_post, in one transaction."""
    with transaction.atomic():
        for meter in Meter.objects.filter(closed_at__isnull=True).order_by("pk").select_for_update():
            meter_post(meter, seconds=whole_seconds(meter.opened_at, now))


def _world(ticks, t0, post, orgs, meters) -> dict:
    """Run the ticks one way, snapshot, roll everything back."""
    out = {}
    try:
        with transaction.atomic():
            for seconds in ticks:
                post(t0 + timedelta(seconds=seconds))
            out = _snapshot(orgs, meters)
            raise _Rollback
    except _Rollback:
        pass
    return out


org_st = st.fixed_dictionaries({
    "trial": st.sampled_from([0, 700, 5_000]), "compensation": st.sampled_from([0, 1_300, 40_000]),
    "grant": st.sampled_from([0, 2_500]), "cash": st.sampled_from([0, 900, 60_000, 5_000_000]),
    "limit": st.sampled_from([0, 3_000]),
    "meters": st.lists(st.tuples(st.integers(1, 8), st.sampled_from([0, 1_000, 1_900_000, 3_600_000]),
                                 st.sampled_from([None, 30])), min_size=1, max_size=4)})


@hyp_settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(spec=st.lists(org_st, min_size=1, max_size=3),
       ticks=st.lists(st.integers(1, 200), min_size=1, max_size=4).map(lambda xs: sorted(set(xs))),
       chunk=st.sampled_from([1, 2, 1000]))
def test_aggregated_postings_match_posting_every_meter_on_its_own(spec, ticks, chunk, settings, monkeypatch):
    monkeypatch.setattr(tick, "CHUNK", chunk)  # organizations split over chunks, or one chunk for all
    t0 = db_now() - timedelta(days=1)
    orgs, meters = [], []
    for o in spec:
        org = OrganizationFactory()
        orgs.append(org)
        settings.TRIAL_CREDIT_UCNY = o["trial"]
        trial_grant(org=org, user=None)
        if o["compensation"]:
            compensation_grant(org=org, breach_id=f"agg-{org.pk}", amount=o["compensation"])
        if o["grant"]:
            grant_credit(org=org, amount=o["grant"], key=f"grant:agg-{org.pk}")
        if o["cash"]:
            fund(org, o["cash"])
        BillingProfile.objects.filter(pk=org.pk).update(credit_limit=o["limit"])
        for cards, rate, until in o["meters"]:
            m = meter_open(org=org, instance_id=uuid.uuid4(), item_index=0,
                           accelerator="h100", cards=cards, rate=rate, opened_at=t0)
            if until is not None:
                Meter.objects.filter(pk=m.pk).update(billable_until_seconds=until)  # auto-stop: the rest written off
            meters.append(m.pk)

    aggregated = _world(ticks, t0, lambda now: tick._tick_chunks(now), orgs, meters)
    per_meter = _world(ticks, t0, _post_each_meter, orgs, meters)

    assert aggregated["verify"] == [] and per_meter["verify"] == []
    assert aggregated == per_meter
    # and the aggregated world wrote one metered transfer per source account and chunk, not one per meter
    # (checked on a committed run of the same ticks)
    for seconds in ticks:
        tick._tick_chunks(t0 + timedelta(seconds=seconds))
    charged = MeterCharge.objects.filter(meter_id__in=meters).aggregate(s=Sum("amount"))["s"] or 0
    theirs = Transfer.objects.filter(code="meter", debit_account__organization__in=orgs)
    assert charged == (theirs.aggregate(s=Sum("amount"))["s"] or 0)
    assert not theirs.filter(meter_id__isnull=False).exists()
    sources = theirs.values("debit_account_id").distinct().count()
    assert theirs.count() <= sources * len(ticks) * max(1, -(-len(meters) // chunk))
