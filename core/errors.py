"""Domain errors that services raise; the API and console turn them into SPEC §5 error codes."""


class ServiceError(Exception):
    """A refusal a customer can act on; `code` is one of SPEC §5's error codes."""

    status = 400
    code = "validation_error"

    def __init__(self, message: str, *, details: dict | None = None, code: str | None = None, status=None):
        super().__init__(message)
        self.message = message
        self.details = details or {}
        if code:
            self.code = code
        if status:
            self.status = status


class ValidationFailed(ServiceError):
    status, code = 400, "validation_error"


class InsufficientFunds(ServiceError):
    status, code = 402, "insufficient_funds"


class PermissionDeniedError(ServiceError):
    status, code = 403, "permission_denied"


class NotFoundError(ServiceError):
    status, code = 404, "not_found"


class InsufficientCapacity(ServiceError):
    status, code = 409, "insufficient_capacity"


class InvalidState(ServiceError):
    status, code = 409, "invalid_state"


class QuotaExceeded(ServiceError):
    status, code = 409, "quota_exceeded"


class ServiceUnavailable(ServiceError):
    status, code = 503, "service_unavailable"


class VerificationRequired(ServiceError):
    """The organization must pass real-name verification (实名认证) first (tenancy/realname/policy.py)."""

    status, code = 403, "verification_required"
