"""The current request id, visible to logging from anywhere in the request or task."""
import contextvars

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
