"""{% capacity_table %}: the fleet's capacity per accelerator and zone on the admin index (templates/admin/index.html)."""
from django import template

from ..selectors import capacity_by_zone

register = template.Library()


@register.inclusion_tag("admin/inventory/capacity.html", takes_context=True)
def capacity_table(context):
    """Rows of inventory.selectors.capacity_by_zone, for operators who may view nodes (else nothing)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.has_perm("inventory.view_node"):
        return {"rows": None}
    rows = capacity_by_zone()
    totals = {k: sum(r[k] for r in rows) for k in ("total", "nodes", "allocated", "free", "failed", "draining", "out")}
    return {"rows": rows, "totals": totals}
