"""The calls provisioning makes into billing, in one place (billing sits below provisioning).

Imported at call time so provisioning keeps working while billing's services are being built;
a missing function is a programming error and raises.
"""
import logging

logger = logging.getLogger("cardmix.provisioning")

PACKAGE_HOURS = 720  # SPEC §4: a monthly package is charged 720 h at the monthly rate


def _services():
    from billing import services

    return services


def funds_check(*, org, price_per_hour: int, billing: str) -> None:
    """402 insufficient_funds unless the org can pay FUNDS_MIN_MINUTES (or the whole package)."""
    hours = PACKAGE_HOURS if billing == "monthly" else None
    _services().funds_check(org=org, price_per_hour=price_per_hour, hours=hours)


def capped_instance_ids(*, org_id) -> set:
    """Instances of the organization with an open meter billing capped at an auto-stop second: the ones its
    auto-stop is for (not one started since, e.g. after a top-up)."""
    from billing.models import Meter

    return set(Meter.objects.filter(organization_id=org_id, closed_at__isnull=True, billable_until_seconds__isnull=False)
               .values_list("instance_id", flat=True))


def meters_open(*, instance, at=None) -> None:
    """One meter per item at its locked rate (a hybrid gets one per accelerator); on entering running, or
    from `at` when a monthly package ended while it ran."""
    services = _services()
    if instance.billing == "monthly":
        # SPEC §4: charged in full when it first enters running; not metered during the package.
        from billing.products.packages import package_active, package_start

        if not package_active(instance.pk):
            package_start(org=instance.organization, instance_id=instance.pk, renewal=instance.package_renewal,
                          items=[{"accelerator": it["accelerator"], "cards": int(it["count"]), "rate": int(it["rate"])}
                                 for it in instance.items])
        return
    for index, item in enumerate(instance.items):
        services.meter_open(org=instance.organization, instance_id=instance.pk, item_index=index,
                            accelerator=item["accelerator"], cards=int(item["count"]), rate=int(item["rate"]),
                            opened_at=at)


def package_renewal_set(*, instance, renewal: str, actor=None, request=None) -> None:
    """The choice the active package period applies at its end (none active: nothing to change). Terminating
    sets "stop": a terminated instance never renews."""
    if instance.billing != "monthly":
        return
    from billing.products.packages import package_renewal_set as renewal_set
    from core.errors import NotFoundError

    try:
        renewal_set(org=instance.organization, instance_id=instance.pk, renewal=renewal, actor=actor, request=request)
    except NotFoundError:  # no active period (never ran, or already ended)
        pass


def packages_current(instances) -> dict:
    """{instance id: latest package period} for the monthly ones among `instances` (rows or models); one query,
    none when no instance is monthly."""
    ids = [i.pk for i in instances if i.billing == "monthly"]
    if not ids:
        return {}
    from billing.products.packages import packages_current as current

    return current(ids)


def meters_close(*, instance_id, at=None) -> None:
    """Close the instance's open meters to the second (on leaving running)."""
    _services().meters_close(instance_id=instance_id, at=at)


def meters_pause(*, instance_id, at, key: str) -> int:
    """Close the instance's open meters at `at` (behind the ticks, maybe) and credit back what was charged after it
    (its node went dark); returns the µCNY credited."""
    return _services().meters_pause(instance_id=instance_id, at=at, key=key)


def instance_costs(instance_ids, now=None) -> dict:
    """{instance id: µCNY cost so far, to the second}; empty when billing cannot answer yet."""
    try:
        from billing.selectors import instance_costs as costs
    except ImportError:
        logger.warning("billing.selectors.instance_costs is not available; cost_so_far shows 0")
        return {}
    return costs(list(instance_ids), now=now)
