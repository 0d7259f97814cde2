"""Logging helpers: the request id on every record."""
import logging

from .request_context import request_id_var


class RequestIdFilter(logging.Filter):
    """Adds `request_id` to each record (empty outside a request)."""

    def filter(self, record):
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get()
        return True
