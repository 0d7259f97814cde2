"""The calls provisioning makes into billing, in one place (billing sits below provisioning)."""
from billing import selectors as billing_selectors
from billing import services as billing_services
from billing.models import Meter
from billing.products import packages
from billing.rating import cumulative_charge, whole_seconds
from core.errors import NotFoundError

PACKAGE_HOURS = 720  # SPEC §4: a monthly package is charged 720 h at the monthly rate


def funds_check(*, org, price_per_hour: int, billing: str) -> None:
    """402 insufficient_funds unless the org can pay FUNDS_MIN_MINUTES (or the whole package)."""
    hours = PACKAGE_HOURS if billing == "monthly" else None
    billing_services.funds_check(org=org, price_per_hour=price_per_hour, hours=hours)


def capped_instance_ids(*, org_id) -> set:
    """Instances of the organization with an open meter billing capped at an auto-stop second: the ones its
    auto-stop is for (not one started since, e.g. after a top-up)."""
    return set(Meter.objects.filter(organization_id=org_id, closed_at__isnull=True, billable_until_seconds__isnull=False)
               .values_list("instance_id", flat=True))


def meters_open(*, instance, at=None) -> None:
    """One meter per item at its locked rate (a hybrid gets one per accelerator); on entering running, or
    from `at` when a monthly package ended while it ran."""
    if instance.billing == "monthly":
        # SPEC §4: charged in full when it first enters running; not metered during the package.
        if not packages.package_active(instance.pk):
            packages.package_start(org=instance.organization, instance_id=instance.pk,
                                   renewal=instance.package_renewal,
                                   items=[{"accelerator": it["accelerator"], "cards": int(it["count"]),
                                           "rate": int(it["rate"])} for it in instance.items])
        return
    for index, item in enumerate(instance.items):
        billing_services.meter_open(org=instance.organization, instance_id=instance.pk, item_index=index,
                            accelerator=item["accelerator"], cards=int(item["count"]), rate=int(item["rate"]),
                            opened_at=at)


def package_renewal_set(*, instance, renewal: str, actor=None, request=None) -> None:
    """The choice the active package period applies at its end (none active: nothing to change). Terminating
    sets "stop": a terminated instance never renews."""
    if instance.billing != "monthly":
        return
    try:
        packages.package_renewal_set(org=instance.organization, instance_id=instance.pk, renewal=renewal, actor=actor, request=request)
    except NotFoundError:  # no active period (never ran, or already ended)
        pass


def packages_current(instances) -> dict:
    """{instance id: latest package period} for the monthly ones among `instances` (rows or models); one query,
    none when no instance is monthly."""
    ids = [i.pk for i in instances if i.billing == "monthly"]
    if not ids:
        return {}
    return packages.packages_current(ids)


def package_of_row(fields: dict):
    """A package period as billing.selectors.instance_cost_expressions' `package` reads it (the list's statement),
    with the attributes the instance body shows (rows._package)."""
    from types import SimpleNamespace

    from core.dbclock import db_time

    return SimpleNamespace(period=fields["period"], state=fields["state"], starts_at=db_time(fields["starts_at"]),
                           ends_at=db_time(fields["ends_at"]), renewal=fields["renewal"])


def meters_close(*, instance_id, at=None, now=None) -> None:
    """Close the instance's open meters to the second (on leaving running); `now`: the database clock already read
    in this transaction."""
    billing_services.meters_close(instance_id=instance_id, at=at, now=now)


def meters_pause(*, instance_id, at, key: str) -> int:
    """Close the instance's open meters at `at` (behind the ticks, maybe) and credit back what was charged after it
    (its node went dark); returns the µCNY credited."""
    return billing_services.meters_pause(instance_id=instance_id, at=at, key=key)


def meter_cards_drop(*, instance_id, item_index: int, cards: int, at, key: str, flag: str) -> dict:
    """`cards` of a running item failed at `at`: not charged from then (the rest go on in a new meter)."""
    return billing_services.meter_cards_drop(instance_id=instance_id, item_index=item_index, cards=cards, at=at,
                                             key=key, flag=flag)


def item_meter_open(*, instance_id, item_index: int):
    """The item's open meter (opened_at, cards), or None (a monthly package, or not running)."""
    return billing_selectors.item_meter_open(instance_id=instance_id, item_index=item_index)


def meter_flag(*, instance_id, item_index: int, flag: str) -> bool:
    """A line on the item's open meter the statement shows (a degraded card: charged and flagged)."""
    return billing_services.meter_flag(instance_id=instance_id, item_index=item_index, flag=flag)


def card_time_value(*, rate: int, start, end) -> int:
    """µCNY one card at `rate` costs from `start` to `end` (whole seconds, cumulative floor)."""
    return cumulative_charge(rate, 1, whole_seconds(start, end)) if end > start else 0


def instance_costs(instance_ids, now=None) -> dict:
    """{instance id: µCNY cost so far, to the second}."""
    return billing_selectors.instance_costs(list(instance_ids), now=now)
