"""Request id: taken from X-Request-ID or made up, echoed back, and attached to every log line."""
import re
import uuid

from .logging import log_context
from .request_context import request_id_var

_SAFE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class RequestIdMiddleware:
    """Gives every request an id for logs, events and the X-Request-ID response header."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.headers.get("X-Request-ID", "")
        request.request_id = incoming if _SAFE.match(incoming) else uuid.uuid4().hex
        token = request_id_var.set(request.request_id)
        try:
            with log_context(org_id="", instance_id=""):  # auth sets the org; nothing leaks to the next request
                response = self.get_response(request)
        finally:
            request_id_var.reset(token)
        response["X-Request-ID"] = request.request_id
        return response


class AdminTimeZoneMiddleware:
    """The admin shows times in the billing time zone, as the console does, each with its offset
    (config/formats: "2026-12-02 22:30:00 UTC+0800"); the API and everything else stay in UTC."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        from django.conf import settings
        from django.utils import timezone

        if not request.path.startswith(settings.ADMIN_URL_PREFIX):
            return self.get_response(request)
        with timezone.override(settings.BILLING_TIME_ZONE):
            return self.get_response(request)
