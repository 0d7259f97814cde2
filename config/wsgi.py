"""WSGI entry point (gunicorn config.wsgi)."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

from core.gc_tuning import tune_for_requests  # noqa: E402

tune_for_requests()
