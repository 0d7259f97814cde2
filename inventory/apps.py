from django.apps import AppConfig


class InventoryConfig(AppConfig):
    """The fleet and the catalog: accelerators, zones, nodes, cards, allocations, prices, images."""

    name = "inventory"
    default_auto_field = "django.db.models.BigAutoField"
