"""Row locks on the fleet, always taken in pk order so that concurrent allocators never deadlock."""
from .models import Card, Node


def cards_lock(card_ids) -> list[Card]:
    """Lock these cards (FOR UPDATE, pk order) with their nodes; call inside transaction.atomic()."""
    return list(Card.objects.select_related("node").filter(pk__in=list(card_ids)).order_by("pk")
                .select_for_update(of=("self",)))


def node_lock(node_id) -> Node:
    """Lock one node row; call inside transaction.atomic()."""
    return Node.objects.select_related("zone", "accelerator").select_for_update(of=("self",)).get(pk=node_id)
