"""Tenant-scoped reads for webhooks."""
import uuid

from django.db.models import Prefetch
from django.utils.translation import gettext

from core.errors import NotFoundError

from .models import WebhookAttempt, WebhookDelivery, WebhookEndpoint


def endpoint_list(*, org):
    return WebhookEndpoint.objects.filter(organization=org, deleted_at__isnull=True).order_by("-created_at")


def endpoint_get(*, org, id) -> WebhookEndpoint:
    endpoint = endpoint_list(org=org).filter(pk=id).first() if _uuid(id) else None
    if endpoint is None:
        raise NotFoundError(gettext("No such webhook endpoint."))
    return endpoint


def delivery_list(*, endpoint):
    return (WebhookDelivery.objects.filter(endpoint=endpoint).select_related("event")
            .prefetch_related(Prefetch("attempt_rows", queryset=WebhookAttempt.objects.order_by("pk"))).order_by("-created_at"))


def delivery_get(*, endpoint, id) -> WebhookDelivery:
    delivery = delivery_list(endpoint=endpoint).filter(pk=id).first() if _uuid(id) else None
    if delivery is None:
        raise NotFoundError(gettext("No such delivery."))
    return delivery


def _uuid(value) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True
