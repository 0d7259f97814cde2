"""Meters: open per running instance item, post cumulative floor deltas, close to the second."""
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.dbclock import db_now
from core.failpoints import failpoint

from .choices import AccountKind, MeterSubject, TransferCode
from .funds import spend
from .ledger import Leg, leg_post, org_account_ids, platform_id
from .lock_objects import meter_lock, meters_lock_open
from .models import Meter, MeterCharge, WriteOff
from .rating import cumulative_charge, posting_plan, whole_seconds, writeoff_seconds


def meter_open(*, org, instance_id, item_index: int, accelerator: str, cards: int, rate: int,
               opened_at=None, subject: str = MeterSubject.INSTANCE) -> Meter:
    """Open the meter of one instance item (or a volume: `subject`) at the database clock; returns the open one if
    it exists."""
    existing = Meter.objects.filter(instance_id=instance_id, item_index=item_index, closed_at__isnull=True).first()
    if existing is not None:
        return existing
    org_account_ids([getattr(org, "pk", org)])  # the tick expects the accounts (and profile) to exist
    try:
        with transaction.atomic():
            return Meter.objects.create(
                organization_id=getattr(org, "pk", org), instance_id=instance_id, item_index=item_index,
                accelerator=accelerator, cards=cards, rate=rate, opened_at=opened_at or db_now(),
                subject=subject)
    except IntegrityError:
        # A concurrent opener won the partial unique index (one open meter per item).
        return Meter.objects.get(instance_id=instance_id, item_index=item_index, closed_at__isnull=True)


def meter_post(meter: Meter, *, seconds: int, close_at=None) -> None:
    """Post a locked meter through `seconds`: spend the chargeable delta, write off the rest, advance it; with
    `close_at`, close it then in the same UPDATE.

    Callers hold the meter's row lock and the transaction, so the counters and the transfers of
    one posting commit together; a retry computing a later second posts just the next delta.
    """
    plan = posting_plan(rate=meter.rate, cards=meter.cards, posted_through=meter.posted_through_seconds,
                        accounted=meter.posted_amount + meter.written_off_amount, seconds=seconds,
                        billable_until=meter.billable_until_seconds)
    closed = {} if close_at is None else {"closed_at": close_at}
    meter.closed_at = close_at or meter.closed_at
    if plan is None:
        if closed:
            Meter.objects.filter(pk=meter.pk).update(**closed)
        return
    key = f"meter:{meter.pk}:{plan.seconds}"
    uncharged = 0
    if plan.chargeable > 0:
        uncharged = spend(org=meter.organization_id, amount=plan.chargeable, key=key, code=TransferCode.METER,
                          meter_id=meter.pk, instance_id=meter.instance_id)
    failpoint("billing.meter_post:after_spend")
    charged = plan.chargeable - uncharged
    written_off = plan.delta - charged
    span = plan.seconds - meter.posted_through_seconds
    meter.posted_through_seconds = plan.seconds
    meter.posted_amount += charged
    meter.written_off_amount += written_off
    if charged > 0:  # the per-meter detail of the posting (MeterCharge): per-meter readers read these rows
        MeterCharge.objects.create(meter_id=meter.pk, through_seconds=plan.seconds, amount=charged,
                                   created_at=timezone.now())  # as the transfers' auto_now_add
    Meter.objects.filter(pk=meter.pk).update(posted_through_seconds=meter.posted_through_seconds,
                                             posted_amount=meter.posted_amount,
                                             written_off_amount=meter.written_off_amount, **closed)
    if written_off > 0:
        WriteOff.objects.create(meter_id=meter.pk, organization_id=meter.organization_id, key=key,
                                seconds=writeoff_seconds(rate=meter.rate, cards=meter.cards, amount=written_off,
                                                         span=span), amount=written_off)
    failpoint("billing.meter_post:before_commit")


def meter_post_now(*, meter_id, now=None) -> Meter:
    """Post one open meter through the database now (or `now`), in its own transaction."""
    with transaction.atomic():
        meter = meter_lock(meter_id)
        if meter.closed_at is None:
            meter_post(meter, seconds=whole_seconds(meter.opened_at, now or db_now()))
        return meter


def meters_close(*, instance_id, at=None, now=None) -> None:
    """Close every open meter of the instance at the database now (or `at`, e.g. the auto-stop second, if
    earlier), posting the final deltas. `now`: the database clock the caller read in this transaction (spares
    a round trip on every stop)."""
    # Inside a transition (`now` given) no savepoint of its own (two round trips on every stop): a failure here fails
    # the whole stop. Called on its own or by other callers it keeps one, so their transaction can go on.
    with transaction.atomic(savepoint=now is None):
        # Never bill seconds that have not run: the auto-stop hook is told the exhaustion second, which can
        # lie ahead of the actual stop (SPEC: billing covers up to the earlier of the two).
        now = now or db_now()
        now = now if at is None else min(at, now)
        for meter in meters_lock_open(instance_id=instance_id):
            failpoint("billing.meters_close:before_close")
            meter_post(meter, seconds=whole_seconds(meter.opened_at, now), close_at=max(now, meter.opened_at))


def meters_pause(*, instance_id, at, key: str) -> int:
    """Close the instance's open meters at `at`, a second that may lie behind ticks already posted (its node went
    dark then), and give back what they charged after it; returns the µCNY credited.

    Each meter is posted through `at` first (a tick may not have got there), then what it charged beyond the
    cumulative floor of its seconds up to `at` returns from compute_revenue to the organization's compensation
    account as one `node_dark` transfer keyed `<key>:<meter id>`, and `credited_amount` records it, all under the
    meter's row lock in one transaction: a retry finds the meter closed and posts nothing. So a meter's net charge
    is min(posted, floor(rate × cards × seconds up to `at` / 3600)), exact to the µCNY whenever the ticks ran.
    """
    credited = 0
    with transaction.atomic():
        at = min(at, db_now())
        for meter in meters_lock_open(instance_id=instance_id):
            credited += _close_behind(meter, at=at, key=key, code=TransferCode.NODE_DARK)
    return credited


def _close_behind(meter: Meter, *, at, key: str, code: str, flag: str = "") -> int:
    """Post a locked meter through `at`, give back what it charged beyond the cumulative floor of its seconds up to
    `at` (compute_revenue → compensation, `<key>:<meter id>`), close it at `at`; → the µCNY credited."""
    through = whole_seconds(meter.opened_at, at)
    meter_post(meter, seconds=through)
    excess = meter.posted_amount - meter.credited_amount - cumulative_charge(meter.rate, meter.cards, through)
    if excess > 0:
        org_id = meter.organization_id
        leg_post(Leg(key=f"{key}:{meter.pk}", debit_id=platform_id(AccountKind.COMPUTE_REVENUE),
                     credit_id=org_account_ids([org_id])[org_id][AccountKind.COMPENSATION], amount=excess,
                     code=code, meter_id=meter.pk, instance_id=meter.instance_id))
        meter.credited_amount += excess
    failpoint("billing.meters_pause:before_close")
    meter.closed_at = max(at, meter.opened_at)
    if flag:
        meter.flags = [*meter.flags, flag]
    Meter.objects.filter(pk=meter.pk).update(closed_at=meter.closed_at, credited_amount=meter.credited_amount,
                                             flags=meter.flags)
    return max(excess, 0)


def meter_cards_drop(*, instance_id, item_index: int, cards: int, at, key: str, flag: str) -> dict:
    """`cards` of a running item stopped being usable at `at` (they failed): its meter closes at `at` (what ticks
    charged past it is given back as compensation, code health_incident, `<key>:<meter id>`: once per key) and the
    rest of its cards go on in a new meter opened at `at`. So those cards cost nothing from that second, exact to
    the µCNY: each meter is its own cumulative floor. → {"credited": µCNY, "meter": the new meter or None}.

    No open meter for the item (a monthly package, or it closed meanwhile): nothing changes."""
    with transaction.atomic():
        at = min(at, db_now())
        meter = next((m for m in meters_lock_open(instance_id=instance_id) if m.item_index == item_index), None)
        if meter is None:
            return {"credited": 0, "meter": None}
        credited = _close_behind(meter, at=at, key=key, code=TransferCode.HEALTH_INCIDENT, flag=flag)
        left = meter.cards - cards
        if left <= 0:
            return {"credited": credited, "meter": None}
        through = whole_seconds(meter.opened_at, at)
        until = meter.billable_until_seconds
        rest = Meter.objects.create(
            organization_id=meter.organization_id, instance_id=meter.instance_id, item_index=item_index,
            accelerator=meter.accelerator, cards=left, rate=meter.rate, opened_at=meter.closed_at,
            subject=meter.subject, billable_until_seconds=None if until is None else max(0, until - through),
            flags=[flag])
        return {"credited": credited, "meter": rest}


def meter_flag(*, instance_id, item_index: int, flag: str) -> bool:
    """Flag the item's open meter (e.g. a degraded card: charged, but the statement says so); False when none is
    open or it carries the flag already."""
    with transaction.atomic():
        meter = next((m for m in meters_lock_open(instance_id=instance_id) if m.item_index == item_index), None)
        if meter is None or flag in meter.flags:
            return False
        Meter.objects.filter(pk=meter.pk).update(flags=[*meter.flags, flag])
        return True
