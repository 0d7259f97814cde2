"""audit_record(): the one way services write the audit log."""
from core.clientip import client_ip
from core.request_context import request_id_var

from .models import AuditEvent


def audit_record(*, action: str, org=None, actor=None, target=None, target_type: str = "", target_id="",
                 request=None, details: dict | None = None, ip: str | None = None) -> AuditEvent:
    """Record one state-changing action; call inside the service's transaction. `ip`: the client's address
    where there is no HTTP request (the SSH gateway)."""
    if target is not None:
        target_type = target_type or target._meta.label_lower
        target_id = target_id or str(target.pk)
    if actor is None and request is not None and getattr(request, "user", None) is not None:
        actor = request.user if request.user.is_authenticated else None
    return AuditEvent.objects.create(
        organization=org,
        actor=actor,
        action=action,
        target_type=target_type,
        target_id=str(target_id or ""),
        ip=ip or client_ip(request),
        user_agent=(request.META.get("HTTP_USER_AGENT", "")[:300] if request is not None else ""),
        request_id=request_id_var.get(),
        details=details or {},
    )
