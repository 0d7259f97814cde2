from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Cross-cutting API conventions: errors, pagination, money, idempotency, health, failpoints."""

    name = "core"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import schema, signals  # noqa: F401  (schema extensions; the task-failure handler)
