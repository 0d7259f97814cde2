from django.apps import AppConfig


class StorageConfig(AppConfig):
    """Volumes (disk, shared), their attachments, the dataset/model library and storage prices."""

    name = "storage"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from inventory.hooks import register_custom_image_deleted

        from . import tasks  # noqa: F401  (register the Celery tasks)
        from .saved_images import saved_image_meter_close

        register_custom_image_deleted(saved_image_meter_close)
