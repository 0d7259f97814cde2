"""Reads for billing: balances, ledger lines, usage and costs, always scoped to one organization."""
import uuid

from django.db.models import BigIntegerField, Case, F, OuterRef, Q, Subquery, Sum, Value, When
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce

from core.dbclock import db_now
from core.querysets import ParsedJSONField

from .choices import TransferCode
from .models import Meter
from .models_products import Package
from .rating import posting_plan, whole_seconds


def instance_costs(instance_ids, *, now=None) -> dict:
    """µCNY per instance id, to the second: its monthly package periods (each charged in full when it starts), what
    its meters posted less what was credited back for a dark node (metering.meters_pause), plus what the open ones
    accrued since their last posting (never past the auto-stop second),
    so the cost does not lag a tick. Two queries; keys as given."""
    given = {uuid.UUID(str(i)): i for i in instance_ids}
    costs = {i: 0 for i in given.values()}
    if not given:
        return costs
    now = now or db_now()
    for m in Meter.objects.filter(instance_id__in=list(given)).only(
            "instance_id", "rate", "cards", "opened_at", "closed_at", "posted_through_seconds", "posted_amount",
            "written_off_amount", "billable_until_seconds", "credited_amount"):
        costs[given[m.instance_id]] += (m.posted_amount - m.credited_amount
                                        + (_unposted(m, now) if m.closed_at is None else 0))
    for instance_id, amount in (Package.objects.filter(instance_id__in=list(given)).order_by()
                                .values("instance_id").annotate(total=Sum("amount")).values_list("instance_id", "total")):
        costs[given[instance_id]] += amount
    return costs


def _unposted(meter: Meter, now) -> int:
    """What the next tick would charge an open meter for the seconds up to `now`."""
    plan = posting_plan(rate=meter.rate, cards=meter.cards, posted_through=meter.posted_through_seconds,
                        accounted=meter.posted_amount + meter.written_off_amount,
                        seconds=whole_seconds(meter.opened_at, now), billable_until=meter.billable_until_seconds)
    return max(plan.chargeable, 0) if plan else 0


def instance_metered_total(instance_id) -> int:
    """µCNY the instance's meters were charged by their postings (ticks and closes: MeterCharge), before any credit
    given back; one query."""
    from .models import MeterCharge

    return int(MeterCharge.objects.filter(meter_id__in=Meter.objects.filter(instance_id=instance_id).values("pk"))
               .aggregate(s=Sum("amount"))["s"] or 0)


def balance_summary(*, org) -> dict:
    """The balance endpoint's numbers: per-kind balances, credit limit, available, burn rate, exhaustion."""
    from .funds import available_from, balances_of, burn_rate_per_hour, exhaustion
    from .models import BillingProfile

    balances = balances_of(org)
    available = available_from(balances)
    burn = burn_rate_per_hour(org)
    warned_at = BillingProfile.objects.filter(pk=org.pk).values_list("low_balance_warned_at", flat=True).first()
    return {**balances, "available": available, "burn_rate_per_hour": burn,
            "exhausts_at": exhaustion(available=available, burn_per_hour=burn, now=db_now()),
            "low_balance_warning": warned_at is not None}


def low_balance_warning(*, org) -> bool:
    """Whether the console shows the low-balance banner for this organization."""
    from .models import BillingProfile

    return BillingProfile.objects.filter(pk=org.pk, low_balance_warned_at__isnull=False).exists()


def transfer_list(*, org):
    """The organization's ledger lines, newest first, with both accounts joined (constant queries)."""
    from .models import Account, Transfer

    ids = list(Account.objects.filter(organization=org).values_list("pk", flat=True))
    return (Transfer.objects.filter(Q(debit_account_id__in=ids) | Q(credit_account_id__in=ids))
            .select_related("debit_account", "credit_account").order_by("-id"))


def usage_list(*, org, start, end):
    """Meters of the organization that ran in [start, end), newest first, with what their postings in
    that window charged (`window_amount`, from MeterCharge: a tick's transfers are per source account, the
    per-meter detail is there) and write-offs (`window_written_off`)."""

    from .models import MeterCharge, WriteOff

    charged = (MeterCharge.objects.filter(meter_id=OuterRef("pk"), created_at__gte=start, created_at__lt=end)
               .values("meter_id").annotate(s=Sum("amount")).values("s"))
    written = (WriteOff.objects.filter(meter_id=OuterRef("pk"), created_at__gte=start, created_at__lt=end)
               .values("meter_id").annotate(s=Sum("amount")).values("s"))
    return (Meter.objects.filter(organization=org, opened_at__lt=end)
            .filter(Q(closed_at__isnull=True) | Q(closed_at__gt=start))
            .annotate(window_amount=Coalesce(Subquery(charged), Value(0)),
                      window_written_off=Coalesce(Subquery(written), Value(0)))
            .order_by("-opened_at", "-pk"))


# A meter's cost so far, to the second of the statement's clock: the same integer arithmetic as posting_plan,
# floor(rate × cards × through / 3600) − accounted, where through is the whole seconds elapsed, capped at the
# auto-stop second, never below what was posted (tests/provisioning/test_cost_so_far.py holds it to instance_costs).
# (least() passes over a NULL cap.)
_METERS_COST = """(SELECT COALESCE(sum(m.posted_amount - m.credited_amount + CASE WHEN m.closed_at IS NULL THEN greatest(
    m.rate * m.cards * greatest(least(floor(extract(epoch FROM statement_timestamp() - m.opened_at))::bigint,
                                      m.billable_until_seconds), m.posted_through_seconds) / 3600
    - m.posted_amount - m.written_off_amount, 0) ELSE 0 END), 0)
  FROM billing_meter m WHERE m.instance_id = {instance_id})"""
_PACKAGES_COST = "(SELECT COALESCE(sum(p.amount), 0) FROM billing_package p WHERE p.instance_id = {instance_id})"
_LATEST_PACKAGE = """(SELECT json_build_object('period', p.period, 'state', p.state, 'starts_at', p.starts_at::text,
                                 'ends_at', p.ends_at::text, 'renewal', p.renewal)
  FROM billing_package p WHERE p.instance_id = {instance_id} ORDER BY p.period DESC LIMIT 1)"""


def instance_cost_expressions(instance_id: str) -> dict:
    """instance_costs and packages_current as expressions for a list's page statement, for the instance whose id is
    the SQL `instance_id` (a column of that statement): {"cost": µCNY so far (its meters, and each package period
    charged in full when it starts), "package": its latest period as packages_current shows it ({"period", "state",
    "starts_at", "ends_at", "renewal"}, times as text; JSON), NULL when none}."""
    cost = f"({_METERS_COST.format(instance_id=instance_id)} + {_PACKAGES_COST.format(instance_id=instance_id)})::bigint"
    return {"cost": RawSQL(cost, (), output_field=BigIntegerField()),
            "package": RawSQL(_LATEST_PACKAGE.format(instance_id=instance_id), (), output_field=ParsedJSONField())}


def transfer_groups(*, org, tz):
    """The organization's ledger lines for reading, newest first: metered usage summed per instance, day (in `tz`)
    and pair of accounts — a tick posts one line per meter per minute, which buried everything else — and every
    other line on its own. Each row: code, instance_id, day, debit/credit account ids, payment_ref, grant_ref,
    total (µCNY), lines, first_at, last_at, last_id, meter_id (when the group has one meter, else None)."""
    from django.db.models import Count, Max, Min
    from django.db.models.functions import TruncDate

    from .choices import TransferCode

    return (transfer_list(org=org).order_by()
            .annotate(day=TruncDate("created_at", tzinfo=tz),
                      grp=Case(When(code=TransferCode.METER, then=Value(0)), default=F("id"),
                               output_field=BigIntegerField()))
            .values("grp", "day", "code", "instance_id", "debit_account_id", "credit_account_id", "payment_ref",
                    "grant_ref")
            .annotate(total=Sum("amount"), lines=Count("id"), first_at=Min("created_at"), last_at=Max("created_at"),
                      last_id=Max("id"), min_meter=Min("meter_id"), max_meter=Max("meter_id"))
            .order_by("-last_id"))


def transfer_day_lines(*, org, instance_id, day, tz):
    """One instance's metered postings of one day (in `tz`), newest first: the drill-down of a transfer_groups row.
    From MeterCharge, the per-meter detail (a tick's transfers are per source account and name no instance): each
    row what one posting of one of its meters charged, all sources together (meter_id, through_seconds, amount,
    created_at)."""
    from datetime import datetime, time, timedelta

    from .models import MeterCharge

    start = datetime.combine(day, time.min, tzinfo=tz)
    end = datetime.combine(day + timedelta(days=1), time.min, tzinfo=tz)
    meters = Meter.objects.filter(organization=org, instance_id=instance_id).values("pk")
    return (MeterCharge.objects.filter(meter_id__in=meters, created_at__gte=start, created_at__lt=end)
            .order_by("-created_at", "-meter_id"))


def trial_expiry(*, org):
    """When the organization's trial credit expires (None: no trial, or already expired)."""
    from .models import BillingProfile

    return (BillingProfile.objects.filter(pk=org.pk, trial_expired_at__isnull=True)
            .values_list("trial_expires_at", flat=True).first())


# Compute spend: what the organization paid for cards (the chart leaves top-ups, grants and refunds out).
SPEND_CODES = (TransferCode.METER, TransferCode.PACKAGE)


def spend_by_day(*, org, now, days: int, tz) -> list[dict]:
    """The last `days` days (in `tz`) of compute spend (meters and packages), oldest first, each
    {"day", "amount" µCNY}; one aggregate query."""
    from datetime import datetime, time, timedelta

    from django.db.models.functions import TruncDate

    today = now.astimezone(tz).date()
    first = today - timedelta(days=days - 1)
    start = datetime.combine(first, time.min, tzinfo=tz)
    totals = dict(transfer_list(org=org).order_by()
                  .filter(debit_account__organization=org, code__in=SPEND_CODES, created_at__gte=start)
                  .annotate(day=TruncDate("created_at", tzinfo=tz)).values("day")
                  .annotate(total=Sum("amount")).values_list("day", "total"))
    return [{"day": first + timedelta(days=i), "amount": int(totals.get(first + timedelta(days=i)) or 0)}
            for i in range(days)]


def account_kinds(*, org) -> dict:
    """{account pk: kind} of the organization's accounts."""
    from .models import Account

    return dict(Account.objects.filter(organization=org).values_list("pk", "kind"))


def sla_compensation_total(*, grant_refs) -> int:
    """µCNY of SLA compensation credited for these request events (their ids as grant refs); one query."""
    from .models import Transfer

    if not grant_refs:
        return 0
    return sum(Transfer.objects.filter(code="sla", grant_ref__in=list(grant_refs)).values_list("amount", flat=True))


def item_meter_open(*, instance_id, item_index: int) -> Meter | None:
    """The open meter of one instance item (one at most: a partial unique index), or None."""
    return Meter.objects.filter(instance_id=instance_id, item_index=item_index, closed_at__isnull=True).first()
