"""One exception handler so every API error reads {"error": {"code", "message", "details"}} (SPEC §5)."""
import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404
from django.utils.translation import gettext as _
from kombu.exceptions import OperationalError as BrokerOperationalError
from redis.exceptions import ConnectionError as RedisConnectionError  # faults: cache/broker down → 503
from redis.exceptions import TimeoutError as RedisTimeoutError
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.settings import api_settings

from .errors import ServiceError

logger = logging.getLogger("cardmix.api")

_DRF_CODES = [
    (drf.NotAuthenticated, "not_authenticated"),
    (drf.AuthenticationFailed, "token_invalid"),
    (drf.PermissionDenied, "permission_denied"),
    (drf.NotFound, "not_found"),
    (drf.MethodNotAllowed, "method_not_allowed"),
    (drf.Throttled, "throttled"),
    (drf.ParseError, "validation_error"),
    (drf.UnsupportedMediaType, "validation_error"),
    (drf.NotAcceptable, "validation_error"),
    (drf.ValidationError, "validation_error"),
]


def error_body(code: str, message: str, details=None) -> dict:
    """The single error envelope of SPEC §5."""
    return {"error": {"code": code, "message": message, "details": details or {}}}


def _validation_details(detail) -> dict:
    """{field: [messages]}; a nested serializer's errors get dotted paths (`items.0.count`), so a
    client reads the field and the message, never the repr of DRF's nested error structure."""
    out: dict[str, list[str]] = {}

    def walk(path: str, node) -> None:
        if isinstance(node, dict):
            for key, sub in node.items():
                if key == api_settings.NON_FIELD_ERRORS_KEY and path:
                    walk(path, sub)  # a list's or nested serializer's own error belongs to its field: `items`
                else:
                    walk(f"{path}.{key}" if path else str(key), sub)
        elif isinstance(node, list):
            for i, sub in enumerate(node):
                if isinstance(sub, (dict, list)):
                    walk(f"{path}.{i}" if path else str(i), sub)  # many=True: one entry per element
                else:
                    out.setdefault(path or "non_field_errors", []).append(str(sub))
        else:
            out.setdefault(path or "non_field_errors", []).append(str(node))

    walk("", detail)
    return out


def api_exception_handler(exc, context):
    """DRF EXCEPTION_HANDLER: map every exception, including unexpected ones, to the envelope."""
    headers = {}
    if isinstance(exc, ServiceError):
        # `message` in the request's language (raise sites wrap it in gettext); `code` stays English.
        return Response(error_body(exc.code, str(exc.message), exc.details), status=exc.status)
    if isinstance(exc, RequestDataTooBig):  # over DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response(error_body("validation_error", _("The request body is too large."),
                                   {"non_field_errors": [str(exc)]}), status=400)
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf.PermissionDenied()
    if isinstance(exc, drf.APIException):
        code = next((c for cls, c in _DRF_CODES if isinstance(exc, cls)), "error")
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if isinstance(exc, drf.Throttled) and exc.wait is not None:
            headers["Retry-After"] = str(int(exc.wait) + 1)
        if code == "validation_error":
            details = _validation_details(exc.detail)
            message = _("The request is invalid.")
        else:
            details = {}
            message = str(exc.detail)  # DRF's own messages come translated by its catalogs
        return Response(error_body(code, message, details), status=exc.status_code, headers=headers)
    if isinstance(exc, (OperationalError, InterfaceError, BrokerOperationalError, RedisConnectionError,
                        RedisTimeoutError)):
        logger.warning("service unavailable", exc_info=exc)
        return Response(
            error_body("service_unavailable", _("A backing service is unavailable; retry shortly.")),
            status=503,
            headers={"Retry-After": "5"},
        )
    if isinstance(exc, DatabaseError):
        logger.exception("database error", exc_info=exc)
    else:
        logger.exception("unhandled API error", exc_info=exc)
    return Response(error_body("internal_error", _("An unexpected error occurred.")), status=500)
