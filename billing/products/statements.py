"""Monthly statements (SPEC §4 Statements): per organization and month in BILLING_TIME_ZONE.

A statement posts nothing and reads only immutable rows (transfers, write-offs) by their creation
time, so a past month's statement is stable: same inputs, same ordering, no "generated at" field.
Amounts are exact µCNY here; the console rounds to the fen for display only.

Usage seconds come from the meter postings' through-seconds (MeterCharge rows, write-off keys
`meter:<id>:<through second>`): a meter's seconds in the month are its through-second at the month's end
minus the one at its start, so seconds, charged amount and written-off amount of a line always describe
the same postings.
"""
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import OuterRef, Q, Subquery, Sum
from django.db.models.functions import TruncMonth
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import NotFoundError, ValidationFailed

from ..choices import ORG_KINDS, REVENUE_KINDS, TransferCode
from ..ledger import platform_id
from ..models import Account, Meter, MeterCharge, Transfer, WriteOff
from ..models_products import Package
from ..zone import billing_tz

MONTH_RE = re.compile(r"^(\d{4})-(\d{2})$")
SPEND_CODES = (TransferCode.METER, TransferCode.PACKAGE)


def month_parse(text: str) -> tuple[int, int]:
    """"2025-03" → (2025, 3), or ValidationFailed."""
    m = MONTH_RE.match(text or "")
    if not m or not 1 <= int(m.group(2)) <= 12 or int(m.group(1)) < 2000:
        raise ValidationFailed(gettext("The month must look like YYYY-MM."), details={"month": [gettext("Use YYYY-MM, e.g. 2025-03.")]})
    return int(m.group(1)), int(m.group(2))


def month_start(year: int, month: int) -> datetime:
    """The month's first instant in the billing time zone (aware); ValidationFailed before 2000 or after 9999."""
    if not (isinstance(year, int) and isinstance(month, int) and 2000 <= year <= 9999 and 1 <= month <= 12):
        raise ValidationFailed(gettext("The month is out of range."), details={"month": [gettext("No such month.")]})
    return datetime(year, month, 1, tzinfo=billing_tz())


def month_bounds(year: int, month: int) -> tuple[datetime, datetime]:
    """[first instant, first instant of the next month) in the billing time zone (aware).

    9999-12 has no representable end (datetime stops at year 9999): ValidationFailed, never a 500."""
    start = month_start(year, month)
    if (year, month) >= (9999, 12):
        raise ValidationFailed(gettext("The month is out of range."), details={"month": [gettext("No such month.")]})
    return start, month_start(year + (month == 12), month % 12 + 1)


def _through(key: str | None) -> int:
    """The through-second of a meter posting key, 0 for none."""
    if not key:
        return 0
    parts = key.split(":")
    return int(parts[2]) if len(parts) >= 3 and parts[0] == "meter" else 0


@dataclass
class Statement:
    """One organization's month: exact µCNY, deterministic order."""

    organization_id: str
    month: str
    time_zone: str
    period_start: datetime
    period_end: datetime
    accounts: list = field(default_factory=list)  # [{account, opening, credits, debits, closing}]
    usage: list = field(default_factory=list)  # one line per meter
    packages: list = field(default_factory=list)  # one line per package period charged this month
    other_charges: list = field(default_factory=list)  # spend of any other code, per transfer
    credits_used: dict = field(default_factory=dict)  # {kind: µCNY spent from it}
    topups: list = field(default_factory=list)  # cash credited by top-ups, per transfer
    movements: list = field(default_factory=list)  # every other non-spend transfer (trial, sla, grant, refund…)
    write_offs: list = field(default_factory=list)  # per meter: seconds and µCNY not charged
    totals: dict = field(default_factory=dict)


# A meter can be charged after its closed_at (a close dated back to when its node went dark or its card failed):
# look that far behind the month for meters first, and at all of them when that does not account for everything.
CLOSED_BEHIND = timedelta(days=2)


def _meter_amounts(org_id, in_month, start, end, metered_total: int) -> dict[int, int]:
    """{meter id: µCNY its postings in the month charged} (MeterCharge), summing to `metered_total`, the metered
    transfers of the month: the meters open in the month first, every meter of the organization if that falls
    short (never expected), so the lines always add up to the transfers."""
    def sums(meters) -> dict[int, int]:
        return {m: int(a) for m, a in (MeterCharge.objects.filter(in_month, meter_id__in=meters.values("pk"))
                                       .order_by().values("meter_id").annotate(a=Sum("amount"))
                                       .values_list("meter_id", "a"))}

    mine = Meter.objects.filter(organization_id=org_id)
    out = sums(mine.filter(opened_at__lt=end).filter(Q(closed_at__isnull=True)
                                                     | Q(closed_at__gte=start - CLOSED_BEHIND)))
    if sum(out.values()) != metered_total:
        out = sums(mine)
    return defaultdict(int, out)


def _org_accounts(org_id) -> dict[int, str]:
    return dict(Account.objects.filter(organization_id=org_id).values_list("pk", "kind"))


def _sums_before(ids, at) -> dict[int, int]:
    """credits − debits per account from transfers created before `at` (two grouped queries)."""
    out: dict[int, int] = defaultdict(int)
    for acc, total in (Transfer.objects.filter(credit_account_id__in=ids, created_at__lt=at).order_by()
                       .values("credit_account_id").annotate(s=Sum("amount")).values_list("credit_account_id", "s")):
        out[acc] += int(total)
    for acc, total in (Transfer.objects.filter(debit_account_id__in=ids, created_at__lt=at).order_by()
                       .values("debit_account_id").annotate(s=Sum("amount")).values_list("debit_account_id", "s")):
        out[acc] -= int(total)
    return out


def statement_build(*, org, month: str, now=None) -> Statement:
    """The statement of `org` for `month` ("YYYY-MM"); a month that has not begun → NotFoundError."""
    year, mon = month_parse(month)
    # Before month_bounds: a future month is a 404, even one whose end is not representable (9999-12).
    if month_start(year, mon) > (now or db_now()):
        raise NotFoundError(gettext("There is no statement for a month that has not begun."))
    start, end = month_bounds(year, mon)
    org_id = getattr(org, "pk", org)
    accounts = _org_accounts(org_id)  # {account id: kind}
    ids = list(accounts)
    revenue = {platform_id(kind) for kind in REVENUE_KINDS}  # spends and the tick's shard
    st = Statement(organization_id=str(org_id), month=f"{year:04d}-{mon:02d}", time_zone=settings.BILLING_TIME_ZONE,
                   period_start=start, period_end=end)
    opening = _sums_before(ids, start)
    month_credits: dict[int, int] = defaultdict(int)
    month_debits: dict[int, int] = defaultdict(int)
    used: dict[str, int] = defaultdict(int)
    in_month = Q(created_at__gte=start, created_at__lt=end)

    # Metered usage: a tick posts one transfer per source account (key tick:…), a close one per meter and source;
    # both count for their accounts here, and what each meter was charged comes from its MeterCharge rows.
    metered = Q(code=TransferCode.METER, debit_account_id__in=ids) & (Q(meter_id__isnull=False)
                                                                      | Q(key__startswith="tick:"))
    metered_total = 0
    for debit_id, credit_id, total in (
            Transfer.objects.filter(in_month).filter(metered).order_by()
            .values("debit_account_id", "credit_account_id").annotate(s=Sum("amount"))
            .values_list("debit_account_id", "credit_account_id", "s")):
        total = int(total)
        metered_total += total
        month_debits[debit_id] += total
        if credit_id in revenue:
            used[accounts[debit_id]] += total
    meter_amounts = _meter_amounts(org_id, in_month, start, end, metered_total)
    wo_rows = {m: (int(s), int(a)) for m, s, a in (
        WriteOff.objects.filter(in_month, organization_id=org_id).order_by().values("meter_id")
        .annotate(s=Sum("seconds"), a=Sum("amount")).values_list("meter_id", "s", "a"))}

    # Everything else is few rows: read them one by one, in id order.
    package_amounts: dict[str, int] = defaultdict(int)
    for t in (Transfer.objects.filter(in_month).filter(Q(debit_account_id__in=ids) | Q(credit_account_id__in=ids))
              .exclude(metered).order_by("id")
              .values("id", "key", "debit_account_id", "credit_account_id", "amount", "code", "instance_id",
                      "payment_ref", "grant_ref", "created_at")):
        debit_is_org = t["debit_account_id"] in accounts
        credit_is_org = t["credit_account_id"] in accounts
        if debit_is_org:
            month_debits[t["debit_account_id"]] += t["amount"]
        if credit_is_org:
            month_credits[t["credit_account_id"]] += t["amount"]
        local_date = t["created_at"].astimezone(billing_tz()).date().isoformat()
        if debit_is_org and t["credit_account_id"] in revenue:
            used[accounts[t["debit_account_id"]]] += t["amount"]
            if t["code"] == TransferCode.PACKAGE and t["key"].startswith("package:"):
                package_amounts[t["key"].split(":")[1]] += t["amount"]
            else:
                st.other_charges.append({"transfer_id": t["id"], "date": local_date, "code": t["code"],
                                         "account": accounts[t["debit_account_id"]], "amount": t["amount"]})
            continue
        line = {"transfer_id": t["id"], "date": local_date, "code": t["code"],
                "account": accounts[t["credit_account_id"] if credit_is_org else t["debit_account_id"]],
                "direction": "credit" if credit_is_org else "debit", "amount": t["amount"],
                "reference": t["payment_ref"] or t["grant_ref"]}
        (st.topups if t["code"] == TransferCode.TOPUP and credit_is_org else st.movements).append(line)

    # One line per meter: seconds between the last posting before the month and the last one in it.
    meter_ids = set(meter_amounts) | set(wo_rows)
    def last_key(at):
        return Subquery(WriteOff.objects.filter(meter_id=OuterRef("pk"), created_at__lt=at).order_by("-id")
                        .values("key")[:1])

    def last_through(at):
        return Subquery(MeterCharge.objects.filter(meter_id=OuterRef("pk"), created_at__lt=at)
                        .order_by("-through_seconds").values("through_seconds")[:1])
    for m in (Meter.objects.filter(pk__in=meter_ids, organization_id=org_id).order_by("pk")
              .annotate(t_before=last_through(start), w_before=last_key(start),
                        t_end=last_through(end), w_end=last_key(end))):
        seconds = (max(m.t_end or 0, _through(m.w_end)) - max(m.t_before or 0, _through(m.w_before)))
        wo_seconds, wo_amount = wo_rows.get(m.pk, (0, 0))
        # subject "volume": instance_id is the volume's id, cards its GiB and rate µCNY per GiB-hour (storage).
        st.usage.append({"meter_id": m.pk, "subject": m.subject, "instance_id": str(m.instance_id),
                         "item_index": m.item_index,
                         "accelerator": m.accelerator, "cards": m.cards, "rate": m.rate, "seconds": seconds,
                         "amount": meter_amounts.get(m.pk, 0), "written_off": wo_amount,
                         "flags": list(m.flags)})  # a card failed or degraded in its time
        if wo_amount:
            st.write_offs.append({"meter_id": m.pk, "seconds": wo_seconds, "amount": wo_amount})

    packages = {str(p.pk): p for p in Package.objects.filter(pk__in=list(package_amounts))}
    for pid in sorted(package_amounts, key=lambda k: (packages[k].starts_at, k) if k in packages else (start, k)):
        p = packages.get(pid)
        st.packages.append({"package_id": pid, "instance_id": str(p.instance_id) if p else "",
                            "period": p.period if p else 0, "items": p.items if p else [],
                            "starts_at": p.starts_at if p else None, "ends_at": p.ends_at if p else None,
                            "amount": package_amounts[pid]})

    for kind in ORG_KINDS:
        acc = next((a for a, k in accounts.items() if k == kind), None)
        o, c, d = opening.get(acc, 0), month_credits.get(acc, 0), month_debits.get(acc, 0)
        st.accounts.append({"account": str(kind), "opening": o, "credits": c, "debits": d, "closing": o + c - d})
    st.credits_used = {str(kind): used.get(str(kind), 0) for kind in ORG_KINDS}
    usage_total = sum(u["amount"] for u in st.usage)
    package_total = sum(p["amount"] for p in st.packages)
    other_total = sum(c["amount"] for c in st.other_charges)
    st.totals = {"usage": usage_total, "packages": package_total, "other_charges": other_total,
                 "charges": usage_total + package_total + other_total,
                 "credits_used": sum(st.credits_used.values()),
                 "topups": sum(t["amount"] for t in st.topups),
                 "write_offs": sum(w["amount"] for w in st.write_offs)}
    return st


def statement_months(*, org) -> list[str]:
    """"YYYY-MM" of every month with a transfer or write-off of the organization, newest first (3 queries)."""
    org_id = getattr(org, "pk", org)
    ids = list(Account.objects.filter(organization_id=org_id).values_list("pk", flat=True))
    tz = billing_tz()
    months = set()
    for qs in (Transfer.objects.filter(Q(debit_account_id__in=ids) | Q(credit_account_id__in=ids)),
               WriteOff.objects.filter(organization_id=org_id)):
        for m in qs.order_by().annotate(m=TruncMonth("created_at", tzinfo=tz)).values_list("m", flat=True).distinct():
            m = m.astimezone(tz) if m.tzinfo else m
            months.add(f"{m.year:04d}-{m.month:02d}")
    return sorted(months, reverse=True)
