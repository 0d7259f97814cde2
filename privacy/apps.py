from django.apps import AppConfig


class PrivacyConfig(AppConfig):
    """The organization export and account deletion; above provisioning, below the console."""

    name = "privacy"
    default_auto_field = "django.db.models.BigAutoField"
