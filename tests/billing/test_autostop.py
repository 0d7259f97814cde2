"""Auto-stop at the exhaustion second, write-offs past it, and low-balance warnings (email + banner)."""
import uuid
from datetime import timedelta

import pytest

from billing import hooks
from billing.funds import available_funds
from billing.models import BillingProfile, Meter, WriteOff
from billing.rating import whole_seconds
from billing.selectors import low_balance_warning
from billing.services import meter_open, meters_close
from billing.tick import meter_tick
from billing.verify import ledger_verify
from core.dbclock import db_now
from tests.factories.billing import fund
from tests.factories.tenancy import MembershipFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def stop_calls():
    """Register a fake auto-stop (provisioning's real one is restored afterwards)."""
    saved = list(hooks._autostop)
    calls = []
    hooks.register_autostop(lambda **kw: calls.append(kw))
    yield calls
    hooks._autostop[:] = saved


def test_autostop_at_exhaustion_second_bills_up_to_it_and_writes_off_the_rest(
        stop_calls, django_capture_on_commit_callbacks, settings):
    settings.METER_TICK_SECONDS = 60
    org = MembershipFactory().organization
    fund(org, 30_000)
    meter = meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1,
                       rate=3_600_000, opened_at=db_now() - timedelta(hours=1))  # 1,000 µCNY per second
    t0 = meter.opened_at  # an hour ago: the simulated stop at t0 + 45 s has happened by the database clock
    with django_capture_on_commit_callbacks(execute=True):
        meter_tick(now=t0 + timedelta(seconds=10))
    assert stop_calls == [{"org_id": org.pk, "at": t0 + timedelta(seconds=30), "reason": "funds_exhausted"}]
    meter.refresh_from_db()
    assert meter.billable_until_seconds == 30
    assert BillingProfile.objects.get(pk=org.pk).autostop_requested_at is not None
    # another tick before the stop lands does not ask again
    with django_capture_on_commit_callbacks(execute=True):
        meter_tick(now=t0 + timedelta(seconds=20))
    assert len(stop_calls) == 1
    # someone tops up meanwhile: seconds past the exhaustion second are still not billed
    fund(org, 1_000_000)
    meters_close(instance_id=meter.instance_id, at=t0 + timedelta(seconds=45))  # the actual stop, later
    meter.refresh_from_db()
    assert meter.posted_amount == 30_000 and meter.written_off_amount == 15_000
    assert sum(WriteOff.objects.filter(meter=meter).values_list("seconds", flat=True)) == 15
    assert available_funds(org) == 1_000_000
    assert ledger_verify() == []


def test_a_stop_that_never_landed_is_asked_for_again_once_its_second_has_passed(
        stop_calls, django_capture_on_commit_callbacks, settings):
    """The fake hook stops nothing, like a stop task lost to a broker outage: every later tick that finds the
    meter still running past its exhaustion second asks again, even after a top-up (those seconds stay
    unbilled), instead of leaving the instance running with every second written off."""
    settings.METER_TICK_SECONDS = 60
    org = MembershipFactory().organization
    fund(org, 30_000)
    meter = meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1,
                       rate=3_600_000, opened_at=db_now() - timedelta(hours=1))  # 1,000 µCNY per second
    t0 = meter.opened_at
    exhausted = {"org_id": org.pk, "at": t0 + timedelta(seconds=30), "reason": "funds_exhausted"}
    with django_capture_on_commit_callbacks(execute=True):
        meter_tick(now=t0 + timedelta(seconds=10))
    assert stop_calls == [exhausted]
    with django_capture_on_commit_callbacks(execute=True):
        meter_tick(now=t0 + timedelta(seconds=20))  # the stop is not due yet
    assert stop_calls == [exhausted]
    with django_capture_on_commit_callbacks(execute=True):
        meter_tick(now=t0 + timedelta(seconds=90))  # due 60 s ago and the meter still runs
    assert stop_calls == [exhausted, exhausted]
    fund(org, 100_000_000)
    with django_capture_on_commit_callbacks(execute=True):
        meter_tick(now=t0 + timedelta(seconds=150))
    assert stop_calls == [exhausted] * 3
    meters_close(instance_id=meter.instance_id, at=exhausted["at"])  # the stop lands at last
    with django_capture_on_commit_callbacks(execute=True):
        meter_tick(now=t0 + timedelta(seconds=210))
    assert len(stop_calls) == 3
    meter.refresh_from_db()
    assert meter.posted_amount == 30_000 and meter.written_off_amount == 120_000
    assert ledger_verify() == []


def test_autostop_when_already_exhausted_stops_now(stop_calls, django_capture_on_commit_callbacks):
    org = MembershipFactory().organization
    meter = meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1,
                       rate=3_600_000)
    with django_capture_on_commit_callbacks(execute=True):
        meter_tick(now=meter.opened_at + timedelta(seconds=5))
    assert stop_calls[0]["at"] == meter.opened_at + timedelta(seconds=5)
    meter.refresh_from_db()
    assert meter.written_off_amount == 5_000 and meter.posted_amount == 0


def test_low_balance_warning_email_and_banner_once_then_cleared(
        stop_calls, django_capture_on_commit_callbacks, mailoutbox, settings):
    settings.LOW_BALANCE_WARNING_SECONDS = 3600
    membership = MembershipFactory(role="owner")
    org = membership.organization
    fund(org, 1_800_000 + 10_000)  # 30 minutes at 3.6 CNY/h after the first 10 s
    meter = meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1,
                       rate=3_600_000)
    t0 = meter.opened_at
    with django_capture_on_commit_callbacks(execute=True):
        meter_tick(now=t0 + timedelta(seconds=10))
        meter_tick(now=t0 + timedelta(seconds=70))
    assert stop_calls == []
    assert len(mailoutbox) == 1 and mailoutbox[0].to == [membership.user.email]
    assert "runs out soon" in mailoutbox[0].subject
    # What the auto-stop it warns of keeps: nothing (before: not said, as if a stopped instance kept its disk).
    assert "A stop keeps nothing but the volumes attached" in mailoutbox[0].body
    assert low_balance_warning(org=org)
    fund(org, 100_000_000)
    meter_tick(now=t0 + timedelta(seconds=130))
    assert not low_balance_warning(org=org)
    assert Meter.objects.get(pk=meter.pk).posted_through_seconds == 130


def test_low_balance_warning_clears_when_nothing_runs_any_more(
        stop_calls, django_capture_on_commit_callbacks, mailoutbox, settings):
    """Warned, then the instance stopped and the customer topped up: nothing burns, so the banner ("funds run
    out soon") goes, and the next episode emails again. The watch only saw organizations with open meters."""
    settings.LOW_BALANCE_WARNING_SECONDS = 3600
    membership = MembershipFactory(role="owner")
    org = membership.organization
    fund(org, 1_800_000 + 10_000)
    meter = meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1,
                       rate=3_600_000, opened_at=db_now() - timedelta(seconds=10))
    with django_capture_on_commit_callbacks(execute=True):
        meter_tick()
    assert low_balance_warning(org=org) and len(mailoutbox) == 1
    meters_close(instance_id=meter.instance_id)
    fund(org, 100_000_000)
    meter_tick()
    assert not low_balance_warning(org=org)
    assert BillingProfile.objects.get(pk=org.pk).low_balance_warned_at is None


def test_close_at_a_future_second_bills_only_the_seconds_that_ran(stop_calls, django_capture_on_commit_callbacks,
                                                                    settings):
    """The hook is told the exhaustion second, which may lie ahead; closing right away at it must not bill
    seconds the instance never ran (closed at the database now instead)."""
    settings.METER_TICK_SECONDS = 60
    org = MembershipFactory().organization
    fund(org, 50_000)  # 50 s at 1,000 µCNY/s
    meter = meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1,
                       rate=3_600_000, opened_at=db_now() - timedelta(seconds=5))
    with django_capture_on_commit_callbacks(execute=True):
        meter_tick()  # ~5 s have run: exhaustion ~45 s ahead, within the tick
    at = stop_calls[0]["at"]
    assert at > db_now() + timedelta(seconds=30)
    meters_close(instance_id=meter.instance_id, at=at)
    meter.refresh_from_db()
    ran = whole_seconds(meter.opened_at, db_now())
    assert meter.closed_at < at and meter.closed_at <= db_now()
    assert 5 <= meter.posted_through_seconds <= ran
    assert meter.posted_amount == meter.posted_through_seconds * 1_000 and meter.written_off_amount == 0
    assert available_funds(org) == 50_000 - meter.posted_amount
    assert ledger_verify() == []


def test_one_organization_s_failing_stop_request_does_not_end_the_others(django_capture_on_commit_callbacks):
    """The overdue asks run one after another once the tick commits (outside a transaction: at once); one that
    raises (a broker error in that organization's stop) used to end the pass, so the later organizations were
    never asked again while the first stayed overdue."""
    asked = []

    def flaky(*, org_id, at, reason):
        asked.append(org_id)
        if len(asked) == 1:
            raise RuntimeError("broker down")

    previous = hooks.autostop_hook()
    hooks.register_autostop(flaky)
    try:
        orgs = [MembershipFactory().organization for _ in range(2)]
        opened = db_now() - timedelta(hours=1)
        for org in orgs:
            meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1, rate=3_600_000,
                       opened_at=opened)
        with django_capture_on_commit_callbacks(execute=True):
            meter_tick(now=opened + timedelta(seconds=10))  # both exhausted at once: the first asks
        asked.clear()
        with django_capture_on_commit_callbacks(execute=True):
            meter_tick(now=opened + timedelta(seconds=90))  # both overdue: asked again, the first one fails
        assert sorted(asked, key=str) == sorted((o.pk for o in orgs), key=str)
    finally:
        hooks.register_autostop(previous)


def test_clearing_idle_flags_keeps_those_with_an_open_meter_and_reads_the_flagged_profiles_by_index(settings):
    """funds_flags_clear_idle runs every tick: it clears only flagged organizations with nothing open, and finds
    the flagged ones through the partial index profile_flagged_idx rather than by scanning every profile (the
    plan is read with sequential scans priced out, so it shows whether the index can serve the query at all,
    whatever the table's size)."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from billing.watch import funds_flags_clear_idle

    running, idle, calm = (MembershipFactory().organization for _ in range(3))
    meter_open(org=running, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1, rate=3_600_000)
    BillingProfile.objects.bulk_create([BillingProfile(organization=o) for o in (running, idle, calm)],
                                       ignore_conflicts=True)
    now = db_now()
    BillingProfile.objects.filter(pk__in=[running.pk, idle.pk]).update(low_balance_warned_at=now,
                                                                       autostop_requested_at=now)
    BillingProfile.objects.filter(pk=calm.pk).update(low_balance_warned_at=None, autostop_requested_at=None)
    with CaptureQueriesContext(connection) as queries:
        assert funds_flags_clear_idle() == 1
    flags = dict(BillingProfile.objects.filter(pk__in=[running.pk, idle.pk])
                 .values_list("pk", "autostop_requested_at"))
    assert flags == {running.pk: now, idle.pk: None}
    (sql,) = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cur.fetchall())
    assert "profile_flagged_idx" in plan and "Seq Scan on billing_billingprofile" not in plan, plan
