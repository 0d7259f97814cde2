"""The webhook refuses what Stripe did not sign, and ignores what changes nothing (signed by the test
with the endpoint secret, exactly as Stripe signs)."""
import json
import time

import pytest
from django.test import Client

from billing.models import Transfer
from billing.models_payments import StripeEvent, TopUp, TopUpState
from billing.payments.selectors import cash_balance
from core.failpoints import armed
from tenancy.models import AuditEvent
from tests.payments.conftest import assert_error, sign

pytestmark = pytest.mark.django_db

URL = "/api/v1/billing/stripe/webhook/"
SECRET = "whsec_security_tests"


@pytest.fixture(autouse=True)
def _secret(settings):
    settings.STRIPE_WEBHOOK_SECRET = SECRET


@pytest.fixture
def topup(member_factory):
    org = member_factory(role="owner").organization
    return TopUp.objects.create(organization=org, amount=100_000_000, amount_fen=10000,
                                stripe_payment_intent_id="pi_sec_1", client_secret="pi_sec_1_secret_x")


def succeeded_event(pi_id="pi_sec_1", event_id="evt_sec_1", amount=10000, metadata=None, status="succeeded"):
    return {"id": event_id, "object": "event", "type": "payment_intent.succeeded", "created": int(time.time()),
            "data": {"object": {"id": pi_id, "object": "payment_intent", "amount": amount,
                                "amount_received": amount, "currency": "cny", "status": status,
                                "latest_charge": "ch_sec_1", "metadata": metadata or {}}}}


def deliver(body: bytes, signature: str | None):
    extra = {} if signature is None else {"HTTP_STRIPE_SIGNATURE": signature}
    return Client().post(URL, data=body, content_type="application/json", **extra)


def _nothing_recorded(topup):
    topup.refresh_from_db()
    assert StripeEvent.objects.count() == 0
    assert Transfer.objects.count() == 0
    assert not AuditEvent.objects.filter(action__startswith="topup.").exists()
    assert topup.state == TopUpState.CREATED and topup.credited_at is None


def test_refused_signatures_record_nothing(topup):
    body = json.dumps(succeeded_event()).encode()
    now = int(time.time())
    altered = body.replace(b'"amount_received": 10000', b'"amount_received": 99990000')
    assert altered != body
    cases = {
        "forged": (body, sign(body, "whsec_someone_else")),
        "expired": (body, sign(body, SECRET, timestamp=now - 301)),
        "future": (body, sign(body, SECRET, timestamp=now + 3600)),
        "altered after signing": (altered, sign(body, SECRET)),
        "malformed json": (b'{"id": "evt_x", "type": ', sign(b'{"id": "evt_x", "type": ', SECRET)),
        "not an event": (b'[1, 2]', sign(b'[1, 2]', SECRET)),
        "missing header": (body, None),
        "garbage header": (body, "nonsense"),
    }
    for name, (payload, signature) in cases.items():
        response = deliver(payload, signature)
        assert response.status_code == 400, name
        err = assert_error(response, 400, "validation_error")
        assert err["details"], name
        _nothing_recorded(topup)
    # Control: the same body, properly signed, is applied.
    response = deliver(body, sign(body, SECRET))
    assert response.status_code == 200 and response.json()["outcome"] == "credited"
    assert cash_balance(org=topup.organization) == 100_000_000


def _failures(reason) -> float:
    from core.metrics import WEBHOOK_FAILURES_TOTAL

    return WEBHOOK_FAILURES_TOTAL.labels(reason=reason)._value.get()


def test_a_body_that_is_not_utf8_is_refused_like_a_bad_signature(topup):
    """Stripe signs UTF-8 JSON only: such a body cannot carry a valid signature (it used to answer 500)."""
    before = {r: _failures(r) for r in ("bad_signature", "malformed", "processing_error")}
    for body in (b"\xff\xfe{}", json.dumps(succeeded_event()).encode() + b"\xc3"):
        for signature in ("t=1,v1=abc", sign(body.decode("latin-1"), SECRET)):
            err = assert_error(deliver(body, signature), 400, "validation_error")
            assert set(err["details"]) == {"Stripe-Signature"}
    assert _failures("bad_signature") == before["bad_signature"] + 4
    assert _failures("malformed") == before["malformed"]
    assert _failures("processing_error") == before["processing_error"]
    _nothing_recorded(topup)


def test_unknown_duplicate_and_out_of_order_events_change_nothing(topup):
    def send(event):
        body = json.dumps(event).encode()
        response = deliver(body, sign(body, SECRET))
        assert response.status_code == 200, response.content
        return response.json()["outcome"]

    unknown_type = {"id": "evt_u1", "type": "customer.created", "created": int(time.time()),
                    "data": {"object": {"id": "cus_1", "object": "customer"}}}
    assert send(unknown_type) == "ignored"
    assert send(succeeded_event(pi_id="pi_not_ours", event_id="evt_u2")) == "unknown_payment_intent"
    assert StripeEvent.objects.count() == 0 and Transfer.objects.count() == 0

    assert send(succeeded_event()) == "credited"
    assert send(succeeded_event()) == "duplicate"
    assert send(succeeded_event(event_id="evt_sec_other")) == "already_applied"
    late_failure = succeeded_event(event_id="evt_sec_fail")
    late_failure["type"] = "payment_intent.payment_failed"
    late_failure["data"]["object"]["status"] = "requires_payment_method"
    assert send(late_failure) == "stale"
    topup.refresh_from_db()
    assert topup.state == TopUpState.SUCCEEDED
    assert cash_balance(org=topup.organization) == 100_000_000
    assert Transfer.objects.filter(key="stripe_pi:pi_sec_1").count() == 1
    assert StripeEvent.objects.count() == 1


def test_processing_error_answers_5xx_and_rolls_back_so_the_retry_applies(topup):
    body = json.dumps(succeeded_event()).encode()
    with armed({"payments:after_apply"}):
        response = deliver(body, sign(body, SECRET))
    assert_error(response, 500, "internal_error")
    _nothing_recorded(topup)
    retry = deliver(body, sign(body, SECRET))
    assert retry.status_code == 200 and retry.json()["outcome"] == "credited"
    assert cash_balance(org=topup.organization) == 100_000_000


def test_organization_comes_from_our_row_not_from_metadata(topup, member_factory):
    other = member_factory(role="owner").organization
    event = succeeded_event(metadata={"organization_id": str(other.pk), "topup_id": str(topup.pk)})
    body = json.dumps(event).encode()
    assert deliver(body, sign(body, SECRET)).json()["outcome"] == "credited"
    assert cash_balance(org=topup.organization) == 100_000_000
    assert cash_balance(org=other) == 0


def test_metadata_cannot_claim_another_rows_credit(topup, member_factory):
    """An intent we never saw, whose metadata names a row that already has its own intent: ignored."""
    event = succeeded_event(pi_id="pi_stranger", event_id="evt_stranger",
                            metadata={"organization_id": str(topup.organization_id), "topup_id": str(topup.pk)})
    body = json.dumps(event).encode()
    assert deliver(body, sign(body, SECRET)).json()["outcome"] == "unknown_payment_intent"
    _nothing_recorded(topup)


def test_intent_id_lost_before_saving_is_adopted_from_matching_metadata(member_factory):
    org = member_factory(role="owner").organization
    row = TopUp.objects.create(organization=org, amount=20_000_000, amount_fen=2000)  # intent id never saved
    event = succeeded_event(pi_id="pi_adopted", event_id="evt_adopt", amount=2000,
                            metadata={"organization_id": str(org.pk), "topup_id": str(row.pk)})
    body = json.dumps(event).encode()
    assert deliver(body, sign(body, SECRET)).json()["outcome"] == "credited"
    row.refresh_from_db()
    assert row.stripe_payment_intent_id == "pi_adopted" and cash_balance(org=org) == 20_000_000


def test_wrong_currency_is_not_credited(topup):
    event = succeeded_event()
    event["data"]["object"]["currency"] = "usd"
    body = json.dumps(event).encode()
    assert deliver(body, sign(body, SECRET)).json()["outcome"] == "rejected_currency"
    _nothing_recorded(topup)
