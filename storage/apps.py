from django.apps import AppConfig


class StorageConfig(AppConfig):
    """Volumes (disk, shared), their attachments, the dataset/model library and storage prices."""

    name = "storage"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import tasks  # noqa: F401  (register the Celery tasks)
