from django.apps import AppConfig


class HardwareConfig(AppConfig):
    """Real hardware paths: node agents and their tokens, Redfish BMC credentials, Slurm partitions."""

    name = "hardware"
    default_auto_field = "django.db.models.BigAutoField"
