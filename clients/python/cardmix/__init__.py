"""Cardmix SDK: `Client(token=…)` and the typed models and errors of the REST API (/api/v1/)."""
from .client import Client
from .errors import (
    CardmixError,
    IdempotencyError,
    InsufficientCapacity,
    InsufficientFunds,
    InvalidState,
    NotAuthenticated,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    ServiceUnavailable,
    Throttled,
    ValidationError,
    VerificationRequired,
    WaitTimeout,
)
from .models import (
    Accelerator,
    Balance,
    Image,
    Instance,
    InstanceEvent,
    Quote,
    ReadinessReport,
    SshKey,
    UsageLine,
    Zone,
)

__all__ = [
    "Accelerator", "Balance", "CardmixError", "Client", "IdempotencyError", "Image", "Instance", "InstanceEvent",
    "InsufficientCapacity", "InsufficientFunds", "InvalidState", "NotAuthenticated", "NotFound", "PermissionDenied", "VerificationRequired",
    "Quote", "QuotaExceeded", "ReadinessReport", "ServiceUnavailable", "SshKey", "Throttled", "UsageLine",
    "ValidationError", "WaitTimeout", "Zone",
]
