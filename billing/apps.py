from django.apps import AppConfig


class BillingConfig(AppConfig):
    """Ledger (accounts, transfers), meters, credits, packages, statements, payments."""

    name = "billing"
    default_auto_field = "django.db.models.BigAutoField"
