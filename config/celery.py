"""The Celery application; configuration comes from Django settings (CELERY_* names)."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("cardmix")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


# --- observability: the worker keeps Django's JSON LOGGING (request/org/instance ids on every line) ---
# Without a receiver Celery replaces the root logger's handlers with its plain-text format.
from celery.signals import setup_logging  # noqa: E402


@setup_logging.connect
def _logging_from_django(**_):
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)
