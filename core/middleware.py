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
