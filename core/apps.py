from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Cross-cutting API conventions: errors, pagination, money, idempotency, health, failpoints."""

    name = "core"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.db.backends.signals import connection_created

        from . import schema, signals  # noqa: F401  (schema extensions; the task-failure handler)
        from .db_loaders import connection_loaders

        connection_created.connect(connection_loaders, dispatch_uid="core.db_loaders")
