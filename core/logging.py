"""Logging helpers: request id, organization id and instance id on every record (JSON logs).

The ids live in context variables: RequestIdMiddleware opens a fresh context per request, the API
authentication and the console middleware set the organization, and provisioning's worker tasks set
the instance. `log_context(...)` sets any of them for a block and restores them afterwards.
"""
import contextlib
import contextvars
import logging

from .request_context import request_id_var

org_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("org_id", default="")
instance_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("instance_id", default="")
_VARS = {"request_id": request_id_var, "org_id": org_id_var, "instance_id": instance_id_var}


def log_context_set(**ids) -> None:
    """Set ids (request_id=, org_id=, instance_id=) for the rest of the current context."""
    for name, value in ids.items():
        _VARS[name].set("" if value is None else str(value))


@contextlib.contextmanager
def log_context(**ids):
    """Set ids for the block, then restore what was there (also undoes log_context_set calls inside)."""
    tokens = [(_VARS[name], _VARS[name].set("" if value is None else str(value))) for name, value in ids.items()]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


class RequestIdFilter(logging.Filter):
    """Adds `request_id`, `org_id` and `instance_id` to each record (empty when unknown).

    A value passed in `extra=` wins over the context's. Django logs a response's 4xx/5xx after the
    middleware has left (the context is gone then), so a record carrying `request` is read from it.
    """

    def filter(self, record):
        request = getattr(record, "request", None)
        org = getattr(request, "org", None)
        fallback = {"request_id": getattr(request, "request_id", ""), "org_id": getattr(org, "pk", "")}
        for name, var in _VARS.items():
            if not getattr(record, name, None):
                setattr(record, name, var.get() or str(fallback.get(name) or ""))
        return True
