"""The API's error envelope `{"error": {"code", "message", "details"}}` as exceptions, one class per code."""


class CardmixError(Exception):
    """Any error the API answered (or the SDK's own: a timeout waiting for a state)."""

    code = "error"

    def __init__(self, message: str, *, code: str | None = None, details: dict | None = None,
                 status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.code = code or self.code
        self.details = details or {}
        self.status = status
        self.retry_after = retry_after

    def __str__(self):
        return self.message


class ValidationError(CardmixError):
    code = "validation_error"


class NotAuthenticated(CardmixError):
    code = "not_authenticated"


class PermissionDenied(CardmixError):
    code = "permission_denied"


class NotFound(CardmixError):
    code = "not_found"


class InsufficientFunds(CardmixError):
    code = "insufficient_funds"


class InsufficientCapacity(CardmixError):
    code = "insufficient_capacity"


class VerificationRequired(CardmixError):
    """The organization must pass real-name verification (实名认证) first: H100/H800, bare metal, large top-ups."""

    code = "verification_required"


class InvalidState(CardmixError):
    code = "invalid_state"


class QuotaExceeded(CardmixError):
    code = "quota_exceeded"


class IdempotencyError(CardmixError):
    code = "idempotency_key_reused"


class Throttled(CardmixError):
    code = "throttled"


class ServiceUnavailable(CardmixError):
    code = "service_unavailable"


class WaitTimeout(CardmixError):
    code = "wait_timeout"


BY_CODE: dict[str, type[CardmixError]] = {
    "validation_error": ValidationError, "not_authenticated": NotAuthenticated, "token_invalid": NotAuthenticated,
    "permission_denied": PermissionDenied, "not_found": NotFound, "insufficient_funds": InsufficientFunds,
    "insufficient_capacity": InsufficientCapacity, "invalid_state": InvalidState, "quota_exceeded": QuotaExceeded,
    "idempotency_in_progress": IdempotencyError, "idempotency_key_reused": IdempotencyError,
    "throttled": Throttled, "service_unavailable": ServiceUnavailable,
    "verification_required": VerificationRequired,
}


def error_from(status: int, body, retry_after: float | None = None) -> CardmixError:
    """The exception for an error response (its envelope, or a plain message when there is none)."""
    envelope = body.get("error") if isinstance(body, dict) else None
    if not isinstance(envelope, dict):
        return CardmixError(f"HTTP {status}", status=status, retry_after=retry_after)
    code = envelope.get("code") or "error"
    cls = BY_CODE.get(code, CardmixError)
    return cls(envelope.get("message") or code, code=code, details=envelope.get("details") or {}, status=status,
               retry_after=retry_after)
