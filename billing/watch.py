"""Funds watch after each tick: auto-stop organizations that run out before the next tick, and warn at
one hour of remaining burn (email + console banner flag)."""
import logging
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, F, OuterRef, Q, Sum
from django.utils.translation import gettext

from core.dbclock import db_now
from core.mail import send_to_people
from core.money import format_fen, format_ucny
from tenancy.audit import audit_record
from tenancy.choices import Role
from tenancy.selectors import members_to_tell
from webhooks.services import event_publish

from .choices import SPEND_ORDER, STOP_KEEPS_NOTHING, MeterSubject
from .hooks import autostop_hook
from .lock_objects import profile_lock
from .models import Account, BillingProfile, Meter
from .rating import whole_seconds

logger = logging.getLogger("cardmix.billing")


def funds_snapshot(org_ids) -> dict:
    """{org_id (UUID): (available, burn_per_hour)} for these organizations in three queries."""
    org_ids = {o if isinstance(o, uuid.UUID) else uuid.UUID(str(o)) for o in org_ids}
    burn = dict(Meter.objects.filter(organization_id__any_array=list(org_ids), closed_at__isnull=True)
                .values("organization_id").annotate(b=Sum(F("rate") * F("cards"))).values_list("organization_id", "b"))
    held = dict(Account.objects.filter(organization_id__any_array=list(org_ids), kind__in=SPEND_ORDER)
                .values("organization_id").annotate(s=Sum("balance")).values_list("organization_id", "s"))
    limits = dict(BillingProfile.objects.filter(organization_id__any_array=list(org_ids)).values_list("organization_id",
                                                                                          "credit_limit"))
    return {o: (int(held.get(o) or 0) + int(limits.get(o) or 0), int(burn.get(o) or 0)) for o in org_ids}


# Every organization with open meters whose funds need a look: short of LOW_BALANCE_WARNING_SECONDS of burn, or
# flagged (to clear when funds recovered). One pass over the open meters (grouped), their accounts and profiles:
# bounded by what runs, and the healthy unflagged majority never reaches Python.
WATCH_SQL = """
WITH burn AS MATERIALIZED (
  SELECT organization_id, sum(rate * cards) AS b FROM billing_meter WHERE closed_at IS NULL
  GROUP BY organization_id HAVING sum(rate * cards) > 0
), held AS (
  SELECT organization_id, sum(balance) AS s FROM billing_account
  WHERE organization_id IN (SELECT organization_id FROM burn) AND kind = ANY(%(kinds)s::varchar[])
  GROUP BY organization_id
), f AS (
  SELECT burn.organization_id, burn.b, coalesce(held.s, 0) + coalesce(bp.credit_limit, 0) AS available,
         (bp.low_balance_warned_at IS NOT NULL OR bp.autostop_requested_at IS NOT NULL) AS flagged
  FROM burn LEFT JOIN held USING (organization_id)
  LEFT JOIN billing_billingprofile bp ON bp.organization_id = burn.organization_id
)
SELECT organization_id, available, b FROM f
WHERE flagged OR greatest(available, 0) * 3600 / b < %(warn)s
"""


def funds_watch_open(*, now=None) -> dict:
    """funds_watch for every organization with open meters, set-based (the tick's watch)."""
    with connection.cursor() as cur:
        cur.execute(WATCH_SQL, {"kinds": [str(k) for k in SPEND_ORDER], "warn": settings.LOW_BALANCE_WARNING_SECONDS})
        snapshot = {org_id: (int(available), int(burn)) for org_id, available, burn in cur.fetchall()}
    return _funds_act(snapshot, now=now or db_now(), overdue=None)


def funds_watch(*, org_ids, now=None) -> dict:
    """Auto-stop or warn the organizations whose funds run short; returns {"stopped": [...], "warned": [...]}."""
    snapshot = funds_snapshot(org_ids)
    return _funds_act(snapshot, now=now or db_now(), overdue=set(snapshot))


def _funds_act(snapshot, *, now, overdue) -> dict:
    """Stop, warn or clear each organization of {org_id: (available, burn)}; then ask again for overdue stops
    (of `overdue`, or of every organization with open meters when None)."""
    stopped, warned, healthy = [], [], []
    for org_id, (available, burn) in snapshot.items():
        if burn <= 0:
            continue
        left_seconds = max(available, 0) * 3600 // burn
        if left_seconds < settings.METER_TICK_SECONDS:
            if _autostop(org_id=org_id, at=now + timedelta(seconds=left_seconds), available=available):
                stopped.append(org_id)
        elif left_seconds < settings.LOW_BALANCE_WARNING_SECONDS:
            if _warn(org_id=org_id, available=available, left_seconds=left_seconds):
                warned.append(org_id)
        else:
            healthy.append(org_id)
    if healthy:  # funds recovered: clear the banner and the auto-stop episode, in one statement
        BillingProfile.objects.filter(pk__any_array=healthy).exclude(low_balance_warned_at=None, autostop_requested_at=None) \
            .update(low_balance_warned_at=None, autostop_requested_at=None)
    _autostop_overdue_retry(None if overdue is None else overdue - set(stopped), skip=set(stopped))
    return {"stopped": stopped, "warned": warned}


def funds_flags_clear_idle() -> int:
    """Clear the low-balance and auto-stop flags of organizations with no open meter; returns how many.

    funds_watch sees only the organizations a tick posted for, so one that was warned, then stopped its
    instances (or was auto-stopped) and topped up kept its banner ("funds run out soon") with nothing
    running, and its next episode sent no email. Nothing burns: funds cannot run out (one statement).
    """
    # The flagged profiles come from their partial index (profile_flagged_idx: the filter is its predicate) and
    # each is looked up in the open meters' index (NOT EXISTS): the tick reads neither every profile nor, as a
    # NOT IN would, every open meter.
    open_meter = Meter.objects.filter(organization_id=OuterRef("organization_id"), closed_at__isnull=True)
    return (BillingProfile.objects.filter(Q(low_balance_warned_at__isnull=False) | Q(autostop_requested_at__isnull=False))
            .filter(~Exists(open_meter))
            .update(low_balance_warned_at=None, autostop_requested_at=None))


def _autostop_overdue_retry(org_ids, *, skip=frozenset()) -> None:
    """Ask again for the stop of every organization with a meter still open past its auto-stop second.

    The request is made once per episode (its meters capped, autostop_requested_at set), so a stop that
    never landed — its task lost to a broker outage, the hook raising after the commit — was never asked
    for again, whatever the funds did later: the instance ran on with every second written off. An open
    meter this tick posted beyond its billable-until second means the instance is still running after the
    stop was due; provisioning's stop is idempotent (only running instances, under their row lock).
    """
    hook = autostop_hook()
    if hook is None or org_ids is not None and not org_ids:
        return
    overdue = Meter.objects.filter(closed_at__isnull=True, billable_until_seconds__isnull=False,
                                   posted_through_seconds__gt=F("billable_until_seconds"))
    if org_ids is not None:
        overdue = overdue.filter(organization_id__any_array=list(org_ids))
    due: dict = {}
    for org_id, opened_at, until in overdue.values_list("organization_id", "opened_at", "billable_until_seconds"):
        if org_id in skip:
            continue
        at = opened_at + timedelta(seconds=until)
        due[org_id] = min(at, due.get(org_id, at))
    for org_id, at in sorted(due.items(), key=lambda kv: str(kv[0])):
        logger.warning("auto-stop overdue: asking again", extra={"organization": str(org_id), "at": at.isoformat()})
        transaction.on_commit(lambda org_id=org_id, at=at: _ask(hook, org_id, at))


def _ask(hook, org_id, at) -> None:
    # After the tick's commit the hooks run one after another: one organization's failure must not end the
    # others' (nor the tick); an overdue stop is asked for again at the next tick.
    try:
        hook(org_id=org_id, at=at, reason="funds_exhausted")
    except Exception:
        logger.exception("auto-stop overdue: the stop request failed", extra={"organization": str(org_id)})


def _autostop(*, org_id, at, available: int) -> bool:
    """Cap the organization's open meters at the exhaustion second and ask provisioning to stop them."""
    with transaction.atomic():
        profile = profile_lock(org_id)
        # Volume meters are never capped: volumes are kept and go on accruing (credit limit, then write-offs) until
        # storage's retention deletes them.
        meters = list(Meter.objects.filter(organization_id=org_id, closed_at__isnull=True, billable_until_seconds=None,
                                           subject=MeterSubject.INSTANCE).order_by("pk").select_for_update())
        if not meters and profile.autostop_requested_at is not None:
            return False  # already requested; the hook is still at work
        for m in meters:
            m.billable_until_seconds = max(whole_seconds(m.opened_at, at), m.posted_through_seconds)
        Meter.objects.bulk_update(meters, ["billable_until_seconds"])
        profile.autostop_requested_at = db_now()
        profile.save(update_fields=["autostop_requested_at"])
        audit_record(action="billing.autostop", org=profile.organization, target=profile.organization,
                     details={"at": at.isoformat(), "available": available, "meters": [m.pk for m in meters]})
        event_publish(org_id=org_id, type="balance.exhausted", dedupe_key=profile.autostop_requested_at.isoformat(),
                      data={"at": at.isoformat(), "available": format_ucny(available)})
        hook = autostop_hook()
        if hook is not None:
            transaction.on_commit(lambda: _ask(hook, org_id, at))
    return True


def _warn(*, org_id, available: int, left_seconds: int) -> bool:
    """Flag the console banner and email owners and admins once per low-balance episode."""
    with transaction.atomic():
        profile = profile_lock(org_id)
        if profile.low_balance_warned_at is not None:
            return False
        profile.low_balance_warned_at = db_now()
        profile.save(update_fields=["low_balance_warned_at"])
        people = members_to_tell(org_id=org_id, roles=[Role.OWNER, Role.ADMIN])
        minutes = left_seconds // 60
        event_publish(org_id=org_id, type="balance.low", dedupe_key=profile.low_balance_warned_at.isoformat(),
                      data={"available": format_ucny(available), "minutes_left": minutes})

        def render():
            return gettext("Cardmix: your balance runs out soon"), gettext(
                "Your organization's available funds (%(available)s) cover about %(minutes)s more minutes of your "
                "running instances. Top up to keep them running: %(url)s\n\nOn-demand instances are stopped when "
                "the funds run out. %(stop_keeps)s") % {
                "available": format_fen(available), "minutes": minutes, "url": f"{settings.SITE_URL}/billing/",
                "stop_keeps": STOP_KEEPS_NOTHING}

        send_to_people(people, render)
    return True
