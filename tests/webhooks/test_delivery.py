"""Delivery in-process against a real loopback receiver: signatures, replays, retries, rotation."""
import json
from datetime import datetime, timedelta

import pytest
import standardwebhooks.webhooks as swh
from django.core import mail
from django.db import transaction
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from core.dbclock import db_now
from webhooks.delivery import delivery_attempt
from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEvent
from webhooks.services import endpoint_create, event_publish, secret_rotate

pytestmark = pytest.mark.django_db


def _publish(org, key="k1", type="instance.running"):
    with transaction.atomic():
        return event_publish(org_id=org.pk, type=type, dedupe_key=key, data={"instance": {"id": key}})


@pytest.fixture
def hook(receiver, loopback_allowed, member_factory):
    owner = member_factory(role="owner")
    endpoint, secret = endpoint_create(org=owner.organization, url=receiver.url,
                                       event_types=["instance.running", "balance.low"])
    return owner, endpoint, secret


def test_a_delivery_is_signed_and_verifies_with_the_standard_library(hook, receiver):
    owner, endpoint, secret = hook
    event = _publish(owner.organization)
    delivery = WebhookDelivery.objects.get(event=event)
    assert delivery_attempt(delivery.pk) == "succeeded"
    [req] = receiver.requests
    payload = Webhook(secret).verify(req.body, req.headers)
    assert payload["type"] == "instance.running" and payload["data"] == {"instance": {"id": "k1"}}
    assert req.headers["webhook-id"] == event.id
    delivery.refresh_from_db()
    assert delivery.state == "succeeded" and delivery.attempt_rows.get().status_code == 204
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 32).verify(req.body, req.headers)  # another secret does not verify


def test_a_replay_older_than_the_tolerance_is_rejected(hook, receiver, monkeypatch):
    owner, endpoint, secret = hook
    delivery = WebhookDelivery.objects.get(event=_publish(owner.organization))
    delivery_attempt(delivery.pk)
    [req] = receiver.requests

    class Later(datetime):  # the receiver's clock, six minutes after the request was signed
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + timedelta(minutes=6)

    monkeypatch.setattr(swh, "datetime", Later)
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(secret).verify(req.body, req.headers)


def test_one_event_once_whatever_the_retries_of_its_caller(hook, receiver):
    owner, endpoint, _ = hook
    first = _publish(owner.organization, key="same")
    assert _publish(owner.organization, key="same") is None
    assert WebhookEvent.objects.count() == 1
    delivery = WebhookDelivery.objects.get(event=first)
    assert delivery_attempt(delivery.pk) == "succeeded"
    assert delivery_attempt(delivery.pk) == "skipped"  # a duplicate task finds it done
    assert len(receiver.requests) == 1


def test_unsubscribed_types_and_organizations_without_endpoints_write_nothing(hook, member_factory):
    owner, *_ = hook
    assert _publish(owner.organization, type="instance.stopped") is None
    assert _publish(member_factory(role="owner").organization) is None
    assert not WebhookEvent.objects.exists()


def test_a_failing_receiver_gets_growing_gaps_then_the_endpoint_is_disabled(
        hook, receiver, settings, django_capture_on_commit_callbacks):
    owner, endpoint, _ = hook
    receiver.status = 500
    delivery = WebhookDelivery.objects.get(event=_publish(owner.organization))
    gaps, outcomes = [], []
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(len(settings.WEBHOOK_RETRY_SCHEDULE) + 1):
            outcomes.append(delivery_attempt(delivery.pk))
            delivery.refresh_from_db()
            if delivery.state == "pending":
                last = delivery.attempt_rows.order_by("-pk").first()
                gaps.append((delivery.next_attempt_at - last.attempted_at).total_seconds())
                # Tests move deadlines, not clocks: the next attempt is due now.
                WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=db_now())
    assert outcomes == ["retry"] * len(settings.WEBHOOK_RETRY_SCHEDULE) + ["failed"]
    assert all(later > earlier for earlier, later in zip(gaps, gaps[1:], strict=False)), gaps
    assert [round(g) for g in gaps] == settings.WEBHOOK_RETRY_SCHEDULE
    assert 2.9 * 86400 < sum(settings.WEBHOOK_RETRY_SCHEDULE) <= 3 * 86400  # "for 3 days"
    endpoint.refresh_from_db()
    assert not endpoint.enabled and "failed attempts" in endpoint.disabled_reason
    assert len(receiver.requests) == len(settings.WEBHOOK_RETRY_SCHEDULE) + 1
    attempt = WebhookAttempt.objects.filter(delivery=delivery).first()
    assert attempt.status_code == 500 and len(attempt.response_body) == settings.WEBHOOK_RESPONSE_MAX_BYTES
    [message] = mail.outbox
    assert owner.user.email in message.to and endpoint.url in message.body
    # Disabled: new events are not queued to it, a pending one is skipped.
    assert _publish(owner.organization, key="after") is None


def test_an_unreachable_receiver_is_an_attempt_with_its_error(hook, receiver):
    owner, endpoint, _ = hook
    receiver.stop()
    delivery = WebhookDelivery.objects.get(event=_publish(owner.organization))
    assert delivery_attempt(delivery.pk) == "retry"
    attempt = WebhookAttempt.objects.get(delivery=delivery)
    assert attempt.status_code is None and "ConnectError" in attempt.error
    receiver.start()  # the fixture stops it again


def test_rotation_signs_with_both_secrets_until_the_overlap_ends(hook, receiver):
    owner, endpoint, old = hook
    new = secret_rotate(endpoint=endpoint)
    delivery_attempt(WebhookDelivery.objects.get(event=_publish(owner.organization, key="a")).pk)
    req = receiver.requests[-1]
    assert len(req.headers["webhook-signature"].split(" ")) == 2
    Webhook(old).verify(req.body, req.headers)
    Webhook(new).verify(req.body, req.headers)
    endpoint.secrets.exclude(expires_at=None).update(expires_at=db_now() - timedelta(seconds=1))
    delivery_attempt(WebhookDelivery.objects.get(event=_publish(owner.organization, key="b")).pk)
    req = receiver.requests[-1]
    Webhook(new).verify(req.body, req.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(req.body, req.headers)
    assert json.loads(req.body)["data"]["instance"]["id"] == "b"
