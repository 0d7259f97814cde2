from django.apps import AppConfig


class ProvisioningConfig(AppConfig):
    """Instances, the transition table, placement, drivers, readiness, SLA, waitlist."""

    name = "provisioning"
    default_auto_field = "django.db.models.BigAutoField"
