"""What placement sees: the catalog with current (lockable) rates and a snapshot of free cards."""
from django.db.models import Max

from inventory.models import Accelerator
from inventory.selectors import current_prices, placement_snapshot

from ..choices import BillingMode, ReportScope
from ..models import ReadinessReport
from ..placement import BARE_METAL, AcceleratorInfo, NodeSnapshot

# Reports whose busbw measures a node's own links (not an inter-node run across several).
MEASURED_SCOPES = (ReportScope.INTRA_NODE, ReportScope.SECOND_PASS)


def prefers_measured(request) -> bool:
    """Bare-metal and multi-node requests prefer nodes measured far above the floor (placement/fleet.py)."""
    return request.kind == BARE_METAL or len(request.items) >= 2


def current_rates(*, billing: str = BillingMode.ON_DEMAND) -> dict[str, int]:
    """slug → µCNY per card-hour in force now for this billing mode (what create/start locks)."""
    pick = 1 if billing == BillingMode.MONTHLY else 0
    return {slug: pair[pick] for slug, pair in current_prices().items()}


def placement_catalog(*, billing: str = BillingMode.ON_DEMAND) -> dict[str, AcceleratorInfo]:
    """Orderable accelerators with a price now, as the placement engine's catalog."""
    rates = current_rates(billing=billing)
    accs = Accelerator.objects.filter(slug__in=list(rates), orderable=True).only("slug", "vendor", "domestic")
    return {a.slug: AcceleratorInfo(a.slug, a.vendor, a.domestic, rates[a.slug]) for a in accs}


def last_busbw(node_ids) -> dict[str, tuple[float, float]]:
    """node id → (busbw GB/s, floor GB/s) of its last intra-node readiness run that measured one (one query)."""
    measured = ReadinessReport.objects.filter(node_id__in=list(node_ids), scope__in=MEASURED_SCOPES,
                                              busbw_largest_gbps__isnull=False)
    # Each node's newest report by id, portably (no DISTINCT ON: `make run` is on SQLite).
    newest = measured.order_by().values("node_id").annotate(last=Max("id")).values("last")
    rows = ReadinessReport.objects.filter(pk__in=newest).values_list("node_id", "busbw_largest_gbps", "floor_gbps")
    return {str(node): (busbw, floor or 0.0) for node, busbw, floor in rows}


def free_snapshot(*, zone: str | None = None, accelerators=None, measured: bool = False) -> list[NodeSnapshot]:
    """Free cards per node as the placement engine's snapshot (node ids as strings); `measured`: with each node's
    last busbw over its floor, for the requests that prefer the best-measured nodes (one query more)."""
    rows = placement_snapshot(zone=zone, accelerators=accelerators)
    bw = last_busbw(r["id"] for r in rows) if measured and rows else {}
    snapshot = []
    for row in rows:
        busbw, floor = bw.get(str(row["id"]), (0.0, 0.0))
        snapshot.append(NodeSnapshot(str(row["id"]), row["zone"], row["accelerator"], row["card_count"], row["free"],
                                     row["state"], round(busbw / floor, 2) if floor > 0 else 0.0))
    return snapshot
