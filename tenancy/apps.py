from django.apps import AppConfig


class TenancyConfig(AppConfig):
    """Users, organizations (the tenants), memberships and roles, tokens, SSH keys, audit log."""

    name = "tenancy"
    default_auto_field = "django.db.models.BigAutoField"
