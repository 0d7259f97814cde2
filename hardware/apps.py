from django.apps import AppConfig

from inventory import hooks


class HardwareConfig(AppConfig):
    """Real hardware paths: node agents and their tokens, Redfish BMC credentials, Slurm partitions."""

    name = "hardware"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from .selectors import bmc_credentials_missing

        # inventory checks Node.bmc_credentials_ref through this (it never imports hardware).
        hooks.register_bmc_credential_lookup(bmc_credentials_missing)
