"""What placement sees: the catalog with current (lockable) rates and a snapshot of free cards."""
from inventory.models import Accelerator
from inventory.selectors import current_prices, placement_snapshot

from ..choices import BillingMode
from ..placement import AcceleratorInfo, NodeSnapshot


def current_rates(*, billing: str = BillingMode.ON_DEMAND) -> dict[str, int]:
    """slug → µCNY per card-hour in force now for this billing mode (what create/start locks)."""
    pick = 1 if billing == BillingMode.MONTHLY else 0
    return {slug: pair[pick] for slug, pair in current_prices().items()}


def placement_catalog(*, billing: str = BillingMode.ON_DEMAND) -> dict[str, AcceleratorInfo]:
    """Orderable accelerators with a price now, as the placement engine's catalog."""
    rates = current_rates(billing=billing)
    accs = Accelerator.objects.filter(slug__in=list(rates), orderable=True).only("slug", "vendor", "domestic")
    return {a.slug: AcceleratorInfo(a.slug, a.vendor, a.domestic, rates[a.slug]) for a in accs}


def free_snapshot(*, zone: str | None = None, accelerators=None) -> list[NodeSnapshot]:
    """Free cards per node as the placement engine's snapshot (node ids as strings)."""
    return [
        NodeSnapshot(str(row["id"]), row["zone"], row["accelerator"], row["card_count"], row["free"], row["state"])
        for row in placement_snapshot(zone=zone, accelerators=accelerators)
    ]
