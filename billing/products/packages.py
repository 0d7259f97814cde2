"""Monthly packages (SPEC §4 Charging): charged in full when the instance first enters running,
30 days from then, unmetered meanwhile; at the end the renewal choice applies.

Provisioning calls, in this order:
  package_funds_check(org=, monthly_price_per_hour=)   before creating a monthly instance (402 otherwise)
  package_start(org=, instance_id=, items=, renewal=)   when the instance first enters running
  package_active(instance_id)                          before opening meters: True → do not meter
  package_renewal_set(org=, instance_id=, renewal=)    when the customer changes the choice or terminates
  packages_current(instance_ids)                       the latest period of each, for the instance body
and registers `hooks.register_package_end(fn)` to hear how each period ended.
A provisioning failure calls nothing, so nothing is charged; stopping neither pauses nor refunds.
"""
import logging
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models.functions import Now
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import InsufficientFunds, NotFoundError, ValidationFailed
from core.mail import send_to_people
from core.money import format_fen, format_ucny
from tenancy.audit import audit_record
from tenancy.selectors import members_to_tell

from ..choices import STOP_KEEPS_NOTHING, TransferCode
from ..funds import funds_check, spend
from ..models_products import (
    PACKAGE_DAYS,
    PACKAGE_HOURS,
    Package,
    PackageOutcome,
    PackageRenewal,
    PackageState,
)
from ..zone import local_time
from .hooks import instance_name, package_end_notify

logger = logging.getLogger("cardmix.billing")


def _org_id(org):
    return getattr(org, "pk", org)


def package_items_clean(items) -> tuple[list[dict], int]:
    """Validate [{accelerator, cards, rate}]; returns (items, Σ rate × cards µCNY per hour)."""
    if not isinstance(items, list) or not items:
        raise ValidationFailed(gettext("A package needs at least one item."), details={"items": [gettext("Must be a non-empty list.")]})
    clean, per_hour = [], 0
    for item in items:
        try:
            accelerator, cards, rate = str(item["accelerator"]), item["cards"], item["rate"]
        except (KeyError, TypeError) as exc:
            raise ValidationFailed(gettext("Each item needs accelerator, cards and rate."),
                                   details={"items": [gettext("Each item needs accelerator, cards and rate.")]}) from exc
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (cards, rate)):
            raise ValidationFailed(gettext("cards and rate must be positive integers."),
                                   details={"items": [gettext("cards and rate (µCNY per card-hour) must be positive integers.")]})
        clean.append({"accelerator": accelerator, "cards": cards, "rate": rate})
        per_hour += cards * rate
    return clean, per_hour


def package_funds_check(*, org, monthly_price_per_hour: int) -> None:
    """Raise InsufficientFunds unless available funds cover the whole 720-hour package at this price."""
    funds_check(org=org, price_per_hour=monthly_price_per_hour, hours=PACKAGE_HOURS)


def _charge(package: Package) -> None:
    """Charge the package in full through the spend path (`package:<id>`); all or nothing."""
    uncharged = spend(org=package.organization_id, amount=package.amount, key=f"package:{package.pk}",
                      code=TransferCode.PACKAGE, instance_id=package.instance_id)
    if uncharged:
        raise InsufficientFunds(
            gettext('Available funds do not cover the monthly package of %(format_ucny)s CNY. Top up first.') % {'format_ucny': format_ucny(package.amount)},
            details={"required": format_ucny(package.amount)})


def package_start(*, org, instance_id, items: list[dict], renewal: str = PackageRenewal.STOP, actor=None) -> Package:
    """Start and charge the first 30-day period when the instance first enters running; idempotent.

    A second call for the same instance (a replayed transition, or a concurrent one: the unique
    (instance_id, period) index makes it wait and then fail over to the first row) returns the
    existing package and charges nothing. Raises InsufficientFunds (nothing persists) without funds.
    """
    clean, per_hour = package_items_clean(items)
    if renewal not in PackageRenewal.values:
        raise ValidationFailed(gettext("Unknown renewal choice."), details={"package_renewal": [gettext('One of %(values)s.') % {'values': PackageRenewal.values}]})
    org_id = _org_id(org)
    existing = Package.objects.filter(instance_id=instance_id).order_by("-period").first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            now = db_now()
            package = Package.objects.create(
                organization_id=org_id, instance_id=instance_id, period=1, items=clean, rate_per_hour=per_hour,
                amount=PACKAGE_HOURS * per_hour, renewal=renewal, starts_at=now,
                ends_at=now + timedelta(days=PACKAGE_DAYS))
            _charge(package)
            audit_record(action="package.start", org=org if hasattr(org, "pk") else None, actor=actor,
                         target=package, details={"instance_id": str(instance_id), "amount": package.amount,
                                                  "renewal": renewal})
            return package
    except IntegrityError:
        # A concurrent call inserted period 1 first and committed; it charged, we do not.
        return Package.objects.get(instance_id=instance_id, period=1)


def package_active(instance_id) -> bool:
    """Whether the instance is inside a package period (provisioning then opens no meters)."""
    return Package.objects.filter(instance_id=instance_id, state=PackageState.ACTIVE).exists()


def packages_current(instance_ids) -> dict:
    """{instance id: its latest package period} for these instances, in one query."""
    latest: dict = {}
    for package in Package.objects.filter(instance_id__in=list(instance_ids)).order_by("instance_id", "-period"):
        latest.setdefault(package.instance_id, package)
    return latest


def package_renewal_set(*, org, instance_id, renewal: str, actor=None, request=None) -> Package:
    """Change what happens at the end of the active period (terminating an instance sets "stop")."""
    if renewal not in PackageRenewal.values:
        raise ValidationFailed(gettext("Unknown renewal choice."), details={"package_renewal": [gettext('One of %(values)s.') % {'values': PackageRenewal.values}]})
    with transaction.atomic():
        package = (Package.objects.select_for_update()
                   .filter(organization_id=_org_id(org), instance_id=instance_id, state=PackageState.ACTIVE).first())
        if package is None:
            raise NotFoundError(gettext("No active package for this instance."))
        if package.renewal != renewal:
            old = package.renewal
            package.renewal = renewal
            package.save(update_fields=["renewal"])
            audit_record(action="package.renewal_set", org=package.organization, actor=actor, target=package,
                         request=request, details={"old": old, "new": renewal})
        return package


def _renew(package: Package, now) -> Package | None:
    """Charge the next period (same items and locked rates) from the old end; None without funds."""
    try:
        with transaction.atomic():
            Package.objects.filter(pk=package.pk).update(state=PackageState.ENDED, outcome=PackageOutcome.RENEWED,
                                                         ended_at=now)
            nxt = Package.objects.create(
                organization_id=package.organization_id, instance_id=package.instance_id, period=package.period + 1,
                items=package.items, rate_per_hour=package.rate_per_hour, amount=package.amount,
                renewal=package.renewal, starts_at=package.ends_at,
                ends_at=package.ends_at + timedelta(days=PACKAGE_DAYS))
            _charge(nxt)
            return nxt
    except InsufficientFunds:
        return None


def _notice_send(package: Package) -> None:
    """Email the organization's owners, admins and billing members that the package could not renew (each in
    their language; runs after the renewal's commit, so it is sent at once)."""
    people = members_to_tell(org_id=package.organization_id, roles=["owner", "admin", "billing"])
    if not people:
        return
    name = instance_name(org_id=package.organization_id, instance_id=package.instance_id)
    instance = f"{name} ({package.instance_id})" if name else str(package.instance_id)

    def render():
        return gettext("Cardmix: your monthly package could not renew"), gettext(
            "The monthly package of instance %(instance)s ended on %(local_time)s and could not renew: available "
            "funds do not cover %(amount)s. The instance is being stopped. %(stop_keeps)s") % {
            "instance": instance, "local_time": local_time(package.ends_at), "amount": format_fen(package.amount),
            "stop_keeps": STOP_KEEPS_NOTHING}

    send_to_people(people, render)


def package_period_end(*, package_id) -> Package | None:
    """Apply the renewal choice of one active period whose end passed (database clock); once."""
    with transaction.atomic():
        package = Package.objects.select_for_update().filter(pk=package_id, state=PackageState.ACTIVE).first()
        if package is None:
            return None
        now = db_now()
        if package.ends_at > now:
            return None
        outcome, notice, nxt = package.renewal, "", None
        if package.renewal == PackageRenewal.RENEW:
            nxt = _renew(package, now)
            outcome = PackageOutcome.RENEWED if nxt is not None else PackageOutcome.STOP
            if nxt is None:
                notice = "Renewal failed: insufficient funds; the instance is stopped."
        if nxt is None:
            Package.objects.filter(pk=package.pk).update(state=PackageState.ENDED, outcome=outcome, notice=notice,
                                                         ended_at=now)
        package.refresh_from_db()
        audit_record(action="package.end", org=package.organization, target=package,
                     details={"outcome": outcome, "renewal": package.renewal, "notice": notice,
                              "next_package": str(nxt.pk) if nxt else None})
        instance_id, ended_at = package.instance_id, package.ends_at
        transaction.on_commit(lambda: package_end_notify(instance_id=instance_id, outcome=outcome, at=ended_at))
        if notice:
            transaction.on_commit(lambda: _notice_send(package))
        return nxt or package


def package_renewals_due(*, limit: int = 500) -> int:
    """End every active period whose `ends_at` passed by the database clock; returns how many."""
    due = list(Package.objects.filter(state=PackageState.ACTIVE, ends_at__lte=Now())
               .order_by("ends_at", "pk").values_list("pk", flat=True)[:limit])
    done = 0
    for package_id in due:
        try:
            if package_period_end(package_id=package_id) is not None:
                done += 1
        except Exception:  # noqa: BLE001 - one broken period must not block the others; retried next beat
            logger.exception("package end failed", extra={"package": str(package_id)})
    return done
