"""Sending one delivery: claim it, POST the signed event, record the attempt, schedule the retry.

At-least-once: the row is claimed with a lease (its next attempt pushed past the request's timeout) and
committed before the request, so no transaction waits on a slow receiver and a crash mid-request only
means one more attempt later, with the same `webhook-id` for the receiver to deduplicate on.
"""
import json
import logging
import time
from datetime import timedelta

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import translation
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import ValidationFailed
from core.mail import send_to_people
from tenancy.choices import Role
from tenancy.selectors import members_to_tell

from .models import DeliveryState, WebhookAttempt, WebhookDelivery
from .secrets_box import secret_decrypt
from .signing import headers_sign
from .targets import target_check

logger = logging.getLogger("cardmix.webhooks")


def _claim(delivery_id) -> WebhookDelivery | None:
    with transaction.atomic():
        delivery = (WebhookDelivery.objects.select_for_update(skip_locked=True, of=("self",))
                    .select_related("event", "endpoint").filter(pk=delivery_id, state=DeliveryState.PENDING).first())
        if delivery is None:
            return None
        now = db_now()
        if delivery.next_attempt_at and delivery.next_attempt_at > now:
            return None  # not due, or another process holds the lease
        if not delivery.endpoint.enabled or delivery.endpoint.deleted_at:
            delivery.state, delivery.finished_at = DeliveryState.SKIPPED, now
            delivery.save(update_fields=["state", "finished_at"])
            return None
        delivery.attempts += 1
        delivery.next_attempt_at = now + timedelta(seconds=4 * settings.WEBHOOK_TIMEOUT_SECONDS + 30)
        delivery.save(update_fields=["attempts", "next_attempt_at"])
        return delivery


def _post(delivery: WebhookDelivery, at) -> tuple[int | None, str, str]:
    """(status code or None, response body truncated, error)."""
    endpoint = delivery.endpoint
    try:
        target_check(endpoint.url)  # again: the name may point elsewhere now
    except ValidationFailed as exc:
        return None, "", str(exc)[:300]
    body = json.dumps(delivery.event.payload, separators=(",", ":"), sort_keys=True)
    secrets = [secret_decrypt(s.secret_encrypted) for s in endpoint.secrets.filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=at)).order_by("-created_at")]
    headers = {"content-type": "application/json", "user-agent": "Cardmix-Webhooks/1",
               **headers_sign(msg_id=delivery.event_id, body=body, secrets=secrets, at=at)}
    limit = settings.WEBHOOK_RESPONSE_MAX_BYTES
    try:
        with httpx.Client(timeout=settings.WEBHOOK_TIMEOUT_SECONDS, follow_redirects=False) as client:
            with client.stream("POST", endpoint.url, content=body.encode(), headers=headers) as response:
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size >= limit:
                        break
                text = b"".join(chunks)[:limit].decode("utf-8", "replace")
                return response.status_code, text, ""
    except httpx.HTTPError as exc:
        return None, "", f"{type(exc).__name__}: {exc}"[:300]


def _disable(delivery: WebhookDelivery) -> None:
    endpoint = delivery.endpoint
    endpoint.enabled = False
    with translation.override(settings.LANGUAGE_CODE):  # stored, read by the API: in one language, whoever runs this
        endpoint.disabled_reason = f"Disabled after {delivery.attempts} failed attempts over {_span()}."
    endpoint.save(update_fields=["enabled", "disabled_reason"])
    people = members_to_tell(org_id=endpoint.organization_id, roles=[Role.OWNER, Role.ADMIN])
    send_to_people(people, lambda: (
        gettext("Cardmix: a webhook endpoint was disabled"),
        gettext("Deliveries to %(url)s failed for %(span)s, so the endpoint was disabled.\nFix the receiver, then "
                "enable the endpoint again in the console (Webhooks) and resend what it missed.") % {
            "url": endpoint.url, "span": _span()}))


def _span() -> str:
    hours = sum(settings.WEBHOOK_RETRY_SCHEDULE) / 3600
    if hours >= 48:
        return gettext("%(days).1f days") % {"days": hours / 24}
    return gettext("%(hours).1f hours") % {"hours": hours}


def delivery_attempt(delivery_id) -> str:
    """One attempt if the delivery is due → 'succeeded' | 'retry' | 'failed' | 'skipped'."""
    delivery = _claim(delivery_id)
    if delivery is None:
        return "skipped"
    at = db_now()
    started = time.monotonic()
    status, text, error = _post(delivery, at)
    ok = status is not None and 200 <= status < 300
    schedule = settings.WEBHOOK_RETRY_SCHEDULE
    with transaction.atomic():
        now = db_now()
        WebhookAttempt.objects.create(delivery=delivery, attempted_at=at, status_code=status, response_body=text,
                                      error=error, duration_ms=int((time.monotonic() - started) * 1000), succeeded=ok)
        if ok:
            delivery.state, delivery.finished_at, delivery.next_attempt_at = DeliveryState.SUCCEEDED, now, None
            outcome = "succeeded"
        elif delivery.attempts <= len(schedule):
            delivery.next_attempt_at = now + timedelta(seconds=schedule[delivery.attempts - 1])
            outcome = "retry"
        else:
            delivery.state, delivery.finished_at, delivery.next_attempt_at = DeliveryState.FAILED, now, None
            outcome = "failed"
            if delivery.attempts == len(schedule) + 1:  # the automatic schedule ran out (not a manual resend)
                _disable(delivery)
        delivery.save(update_fields=["state", "finished_at", "next_attempt_at"])
    logger.info("webhook attempt", extra={"delivery": str(delivery.pk), "status": status, "outcome": outcome})
    return outcome


def deliveries_due(limit: int = 500) -> list:
    """Ids of pending deliveries whose next attempt is due (the beat task dispatches them)."""
    return list(WebhookDelivery.objects.filter(state=DeliveryState.PENDING, next_attempt_at__lte=db_now())
                .order_by("next_attempt_at").values_list("pk", flat=True)[:limit])
