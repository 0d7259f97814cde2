"""Writes for webhooks: endpoints, secret rotation, publishing an event, resending a delivery."""
import json
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import InvalidState, ValidationFailed
from core.outbox import outbox_send
from tenancy.audit import audit_record

from .events import EVENT_TYPES
from .models import DeliveryState, WebhookDelivery, WebhookEndpoint, WebhookEvent, WebhookSecret
from .secrets_box import secret_encrypt, secret_generate
from .targets import target_check

MAX_ENDPOINTS_PER_ORG = 20


def _event_types_clean(event_types) -> list[str]:
    if not isinstance(event_types, list) or not event_types:
        raise ValidationFailed(gettext("Choose at least one event type."), details={"event_types": [gettext("Choose at least one.")]})
    unknown = sorted({str(t) for t in event_types} - set(EVENT_TYPES))
    if unknown:
        raise ValidationFailed(gettext("Unknown event type."), details={
            "event_types": [gettext("Unknown event type %(type)s; choose from %(types)s.") % {
                "type": repr(t), "types": ", ".join(EVENT_TYPES)} for t in unknown]})
    return sorted(set(event_types))


def _secret_add(endpoint: WebhookEndpoint) -> str:
    secret = secret_generate()
    WebhookSecret.objects.create(endpoint=endpoint, secret_encrypted=secret_encrypt(secret), prefix=secret[:10])
    return secret


def endpoint_create(*, org, url: str, event_types, description: str = "", actor=None,
                    request=None) -> tuple[WebhookEndpoint, str]:
    """Register an endpoint → (endpoint, signing secret shown once)."""
    url = target_check(url)
    event_types = _event_types_clean(event_types)
    with transaction.atomic():
        if WebhookEndpoint.objects.filter(organization=org, deleted_at__isnull=True).count() >= MAX_ENDPOINTS_PER_ORG:
            raise ValidationFailed(gettext('An organization has at most %(MAX_ENDPOINTS_PER_ORG)s webhook endpoints.') % {'MAX_ENDPOINTS_PER_ORG': MAX_ENDPOINTS_PER_ORG},
                                   details={"url": [gettext("Delete an endpoint first.")]})
        endpoint = WebhookEndpoint.objects.create(organization=org, url=url, event_types=event_types,
                                                  description=(description or "")[:200], created_by=actor)
        secret = _secret_add(endpoint)
        audit_record(action="webhook.create", org=org, actor=actor, target=endpoint, request=request,
                     details={"url": url, "event_types": event_types})
    return endpoint, secret


def endpoint_update(*, endpoint: WebhookEndpoint, actor=None, request=None, **changes) -> WebhookEndpoint:
    """Change url, event types, description, or re-enable (`enabled=True`) an endpoint."""
    fields = []
    if "url" in changes:
        endpoint.url = target_check(changes["url"])
        fields.append("url")
    if "event_types" in changes:
        endpoint.event_types = _event_types_clean(changes["event_types"])
        fields.append("event_types")
    if "description" in changes:
        endpoint.description = (changes["description"] or "")[:200]
        fields.append("description")
    if "enabled" in changes:
        endpoint.enabled = bool(changes["enabled"])
        endpoint.disabled_reason = "" if endpoint.enabled else "Disabled by a member."
        fields += ["enabled", "disabled_reason"]
    with transaction.atomic():
        endpoint.save(update_fields=fields or None)
        audit_record(action="webhook.update", org=endpoint.organization, actor=actor, target=endpoint,
                     request=request, details={f: str(getattr(endpoint, f)) for f in fields})
    return endpoint


def endpoint_delete(*, endpoint: WebhookEndpoint, actor=None, request=None) -> None:
    with transaction.atomic():
        endpoint.deleted_at = db_now()
        endpoint.enabled = False
        endpoint.save(update_fields=["deleted_at", "enabled"])
        endpoint.deliveries.filter(state=DeliveryState.PENDING).update(state=DeliveryState.SKIPPED,
                                                                        finished_at=endpoint.deleted_at)
        audit_record(action="webhook.delete", org=endpoint.organization, actor=actor, target=endpoint,
                     request=request, details={"url": endpoint.url})


def secret_rotate(*, endpoint: WebhookEndpoint, actor=None, request=None) -> str:
    """A new signing secret; the old ones keep signing for WEBHOOK_SECRET_OVERLAP_HOURS, then expire."""
    now = db_now()
    with transaction.atomic():
        endpoint.secrets.filter(expires_at__isnull=True).update(
            expires_at=now + timedelta(hours=settings.WEBHOOK_SECRET_OVERLAP_HOURS))
        secret = _secret_add(endpoint)
        audit_record(action="webhook.secret_rotate", org=endpoint.organization, actor=actor, target=endpoint,
                     request=request, details={"prefix": secret[:10]})
    return secret


def event_publish(*, org_id, type: str, dedupe_key: str, data: dict) -> WebhookEvent | None:
    """Queue `type` to every live endpoint of the organization that subscribes to it, once per dedupe_key.

    Call inside the transaction of the change it reports: the event and its deliveries commit with it, and
    the delivery tasks leave through the outbox. Nothing is written for organizations without a subscriber.
    """
    if type not in EVENT_TYPES:
        raise ValueError(f"unknown webhook event type {type!r}")
    endpoints = [e for e in WebhookEndpoint.objects.filter(organization_id=org_id, enabled=True,
                                                           deleted_at__isnull=True)
                 if type in e.event_types]
    if not endpoints:
        return None
    now = db_now()
    event_id = "msg_" + uuid.uuid4().hex
    payload = {"type": type, "timestamp": now.isoformat().replace("+00:00", "Z"), "data": data}
    try:
        with transaction.atomic():  # a savepoint: a duplicate must not break the caller's transaction
            event = WebhookEvent.objects.create(id=event_id, organization_id=org_id, type=type,
                                                payload=json.loads(json.dumps(payload, default=str)),
                                                dedupe_key=f"{type}:{dedupe_key}"[:200], created_at=now)
    except IntegrityError:
        return None  # already published
    for endpoint in endpoints:
        delivery = WebhookDelivery.objects.create(event=event, endpoint=endpoint, created_at=now, next_attempt_at=now)
        outbox_send("webhooks.deliver", args=[str(delivery.pk)])
    return event


def delivery_resend(*, delivery: WebhookDelivery, actor=None, request=None) -> WebhookDelivery:
    """Send a delivery again now (a new attempt with a fresh timestamp and the same webhook-id)."""
    if not delivery.endpoint.enabled or delivery.endpoint.deleted_at:
        raise InvalidState(gettext("The endpoint is disabled; enable it before resending."),
                           details={"endpoint": [gettext("disabled")]})
    with transaction.atomic():
        WebhookDelivery.objects.filter(pk=delivery.pk).update(state=DeliveryState.PENDING, next_attempt_at=db_now(),
                                                              finished_at=None)
        audit_record(action="webhook.resend", org=delivery.endpoint.organization, actor=actor,
                     target=delivery.endpoint, request=request, details={"delivery": str(delivery.pk)})
        outbox_send("webhooks.deliver", args=[str(delivery.pk)])
    delivery.refresh_from_db()
    return delivery
