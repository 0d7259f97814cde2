from django.apps import AppConfig

from tenancy.hooks import register_trial_grant


class BillingConfig(AppConfig):
    """Ledger (accounts, transfers), meters, credits, packages, statements, payments."""

    name = "billing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import lookups, tasks  # noqa: F401  (register the any_array lookup and Celery tasks)
        from .credits import trial_grant

        register_trial_grant(trial_grant)  # tenancy calls it when an organization is created
