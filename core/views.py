"""Health check and the error pages that keep the SPEC §5 envelope under /api/."""
import logging
import sys

from celery import current_app
from django.conf import settings
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.exceptions import NotFound

from .exceptions import error_body

logger = logging.getLogger("cardmix.health")


def _check_database() -> tuple[str, str | None]:
    """("ok", "PostgreSQL 18 (embedded)") — the server's major version only: the page answers anyone."""
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT current_setting('server_version_num')::int / 10000")
            major = cur.fetchone()[0]
    except Exception as exc:  # report, never raise: this is the health page
        logger.warning("healthz database check failed: %s", exc)
        return "error", None
    return "ok", f"PostgreSQL {major} ({'embedded' if settings.EMBEDDED_POSTGRES else 'DATABASE_URL'})"


def _check_broker() -> str:
    try:
        # the project's app (config/__init__.py makes it current); core sits below config
        with current_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return "ok"
    except Exception as exc:
        logger.warning("healthz broker check failed: %s", exc)
        return "error"


def healthz(request):
    """200 when the database and the broker answer, 503 otherwise; names the database server."""
    database, engine = _check_database()
    checks = {"database": database, "broker": _check_broker()}
    ok = all(v == "ok" for v in checks.values())
    return JsonResponse({"status": "ok" if ok else "error", **checks, "database_engine": engine},
                        status=200 if ok else 503)


@extend_schema(exclude=True)
@api_view(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
@authentication_classes([])
@permission_classes([])
def api_not_found(request, unknown=""):
    """Any unknown path under /api/v1/ answers 404 in the error format."""
    raise NotFound(_("No such API endpoint."))


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def page_not_found(request, exception=None):
    if _is_api(request):
        return JsonResponse(error_body("not_found", _("Not found.")), status=404)
    return render(request, "404.html", status=404)


def _backing_service_down() -> bool:
    """Django calls the 500 handler while handling the exception: is it a database/Redis outage?"""
    from django.db import InterfaceError, OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return isinstance(sys.exc_info()[1], (OperationalError, InterfaceError, RedisConnectionError, RedisTimeoutError))


def server_error(request):
    if _backing_service_down():  # faults: an outage outside DRF (sessions, console) → 503, retry
        body = error_body("service_unavailable", _("A backing service is unavailable; retry shortly."))
        if _is_api(request):
            return JsonResponse(body, status=503, headers={"Retry-After": "5"})
        # No template: rendering one may need the database that is down.
        return HttpResponse("<!doctype html><title>Service unavailable</title><h1>Service temporarily unavailable"
                            "</h1><p>Please retry in a few seconds.</p>", status=503, headers={"Retry-After": "5"})
    if _is_api(request):
        return JsonResponse(error_body("internal_error", _("An unexpected error occurred.")), status=500)
    return render(request, "500.html", status=500)
