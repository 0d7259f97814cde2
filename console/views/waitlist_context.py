"""What a waitlisted instance's page says beside its queue position: when the request expires, how long such
requests waited lately, and card types or zones that are free now."""
from inventory.selectors import accelerators_orderable, current_prices, stock_by_zone, zone_list
from provisioning import selectors
from provisioning.choices import InstanceState as S

from ..catalog_names import accelerator_names

SUGGESTIONS = 3


def alternatives(instance) -> list[dict]:
    """Up to three single-card-type requests free now that could replace the waiting one: the same card type in
    another zone first, then other card types of the same vendor (same images), cheapest first; each with its
    on-demand price per hour. Four queries."""
    if not instance.items:
        return []
    prices = current_prices()
    stock = stock_by_zone()
    wanted = [(it["accelerator"], int(it["count"])) for it in instance.items]
    if len(wanted) != 1:
        return []  # a hybrid's parts must share a zone: no drop-in suggestion (the waitlist keeps its place)
    slug, count = wanted[0]
    vendors = dict(accelerators_orderable().values_list("slug", "vendor"))
    pinned = instance.zone.slug if instance.zone_id else None
    found = []
    for (zone, acc), row in sorted(stock.items()):
        if acc not in prices or acc not in vendors or row["available_cards"] < count:
            continue
        if acc == slug and zone == pinned:
            continue  # that is what is sold out
        if acc != slug and vendors.get(acc) != vendors.get(slug):
            continue  # another vendor needs another image: not a drop-in replacement
        found.append((acc != slug, prices[acc][0], zone, acc))
    found.sort()
    zones = {z.slug: z for z in zone_list({f[2] for f in found})}
    names = accelerator_names({f[3] for f in found})
    return [{"zone": zones.get(zone), "accelerator": acc, "name": names.get(acc, acc), "count": count,
             "price_per_hour": price * count, "same_card": not other}
            for other, price, zone, acc in found[:SUGGESTIONS]]


def waitlist_context(instance) -> dict:
    """{} unless the instance is waitlisted."""
    if instance.state != S.WAITLISTED:
        return {}
    median, samples = selectors.waitlist_wait_estimate(instance=instance)
    return {"waitlist": {"expires_at": instance.expires_at, "estimate_seconds": median, "estimate_samples": samples,
                         "alternatives": alternatives(instance)}}
