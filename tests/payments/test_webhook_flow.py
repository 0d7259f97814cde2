"""The real flow through localstripe's signed webhooks to the live test server: credited exactly once,
under replays, concurrent copies, and a missed webhook recovered by reconciliation."""
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from billing.models import Transfer
from billing.models_payments import StripeEvent, TopUp, TopUpState
from billing.payments.reconcile import payments_reconcile
from billing.payments.selectors import cash_balance
from tests.payments.conftest import DECLINED_CARD, pay, post_raw, register_webhook, wait_for

pytestmark = [pytest.mark.django_db(transaction=True)]

URL = "/api/v1/billing/topups/"


def _create_topup(client, amount="100.00") -> TopUp:
    response = client.post(URL, {"amount": amount}, format="json")
    assert response.status_code == 201, response.content
    return TopUp.objects.get(pk=response.json()["id"])


def _credits_for(topup) -> list[Transfer]:
    return list(Transfer.objects.filter(key=f"stripe_pi:{topup.stripe_payment_intent_id}"))


def test_real_flow_credits_once_even_when_replayed_and_delivered_concurrently(
        stripe_env, webhook_to_live_server, localstripe_url, capture_factory, member_factory, session_client_for):
    owner = member_factory(role="owner")
    org = owner.organization
    # A second endpoint records exactly what localstripe signs and sends, for the replays below.
    capture = capture_factory(200)
    register_webhook(localstripe_url, "capture", capture.url, stripe_env.STRIPE_WEBHOOK_SECRET)

    topup = _create_topup(session_client_for(owner))
    assert cash_balance(org=org) == 0
    intent = pay(topup.stripe_payment_intent_id)
    assert intent.status == "succeeded"

    wait_for(lambda: TopUp.objects.get(pk=topup.pk).state == TopUpState.SUCCEEDED, what="the webhook's credit")
    topup.refresh_from_db()
    assert cash_balance(org=org) == 100_000_000
    assert topup.amount_received_fen == 10000 and topup.client_secret == "" and topup.credited_at
    assert len(_credits_for(topup)) == 1
    assert StripeEvent.objects.filter(type="payment_intent.succeeded", topup=topup).count() == 1

    body, headers = wait_for(lambda: capture.events("payment_intent.succeeded"), what="the captured event")[0]
    assert json.loads(body)["data"]["object"]["id"] == topup.stripe_payment_intent_id
    signature = headers["Stripe-Signature"]

    # The same signed event, replayed 5 times: 2xx, nothing changes.
    for _ in range(5):
        status, answer = post_raw(webhook_to_live_server, body, signature)
        assert status == 200 and json.loads(answer)["outcome"] == "duplicate"
    # 20 concurrent copies: all 2xx, still one credit.
    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(lambda _: post_raw(webhook_to_live_server, body, signature), range(20)))
    assert [s for s, _ in results] == [200] * 20
    assert cash_balance(org=org) == 100_000_000
    assert len(_credits_for(topup)) == 1
    assert StripeEvent.objects.count() == 1


def test_concurrent_copies_of_a_fresh_event_credit_once(stripe_env, live_server, localstripe_url, capture_factory,
                                                        member_factory, session_client_for):
    """Nothing applied yet: 20 simultaneous first deliveries race on the event row; one wins."""
    owner = member_factory(role="owner")
    capture = capture_factory(500)  # our endpoint is not registered: localstripe sends only here
    register_webhook(localstripe_url, "cardmix", capture.url, stripe_env.STRIPE_WEBHOOK_SECRET)
    topup = _create_topup(session_client_for(owner), "42.00")
    pay(topup.stripe_payment_intent_id)
    body, headers = wait_for(lambda: capture.events("payment_intent.succeeded"), what="the captured event")[0]
    assert TopUp.objects.get(pk=topup.pk).credited_at is None

    endpoint = live_server.url + "/api/v1/billing/stripe/webhook/"
    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(lambda _: post_raw(endpoint, body, headers["Stripe-Signature"]), range(20)))
    outcomes = sorted(json.loads(a)["outcome"] for _, a in results)
    assert [s for s, _ in results] == [200] * 20
    assert outcomes == ["credited"] + ["duplicate"] * 19
    assert cash_balance(org=owner.organization) == 42_000_000
    assert len(_credits_for(topup)) == 1


def _missed_payment(stripe_env, localstripe_url, capture_factory, client, amount):
    """A paid top-up whose webhook never reached us; returns (topup, captured body, its signature)."""
    # "Unregistered": localstripe's only endpoint is a stand-in that fails, so Stripe would retry later.
    down = capture_factory(503)
    register_webhook(localstripe_url, "cardmix", down.url, stripe_env.STRIPE_WEBHOOK_SECRET)
    topup = _create_topup(client, amount)
    pay(topup.stripe_payment_intent_id)
    body, headers = wait_for(lambda: down.events("payment_intent.succeeded"), what="the undelivered event")[0]
    assert cash_balance(org=topup.organization) == 0 and TopUp.objects.get(pk=topup.pk).state == TopUpState.CREATED
    return topup, body, headers["Stripe-Signature"]


def test_missed_webhook_is_reconciled_then_late_delivery_changes_nothing(
        stripe_env, live_server, localstripe_url, capture_factory, member_factory, session_client_for):
    owner = member_factory(role="owner")
    org = owner.organization
    topup, body, signature = _missed_payment(stripe_env, localstripe_url, capture_factory,
                                             session_client_for(owner), "88.00")

    assert payments_reconcile() == {"credited": 1}
    topup.refresh_from_db()
    assert topup.state == TopUpState.SUCCEEDED and cash_balance(org=org) == 88_000_000
    assert StripeEvent.objects.get(topup=topup).source == "reconciliation"
    assert payments_reconcile() == {}  # a second run finds nothing to do

    # Re-registered, and the real signed event finally delivered (as Stripe's retry would): no second credit.
    endpoint = live_server.url + "/api/v1/billing/stripe/webhook/"
    register_webhook(localstripe_url, "cardmix", endpoint, stripe_env.STRIPE_WEBHOOK_SECRET)
    status, answer = post_raw(endpoint, body, signature)
    assert status == 200 and json.loads(answer)["outcome"] == "already_applied"
    assert cash_balance(org=org) == 88_000_000
    assert len(_credits_for(topup)) == 1
    assert StripeEvent.objects.count() == 1


@pytest.mark.worker
def test_reconciliation_task_runs_in_a_celery_worker(stripe_env, localstripe_url, capture_factory, member_factory,
                                                     session_client_for, start_worker):
    from billing.payments.tasks import payments_reconcile_task

    owner = member_factory(role="owner")
    topup, _body, _sig = _missed_payment(stripe_env, localstripe_url, capture_factory,
                                         session_client_for(owner), "12.00")
    start_worker(extra_env={"STRIPE_API_BASE": localstripe_url, "STRIPE_API_KEY": stripe_env.STRIPE_API_KEY})
    payments_reconcile_task.delay()
    wait_for(lambda: TopUp.objects.get(pk=topup.pk).state == TopUpState.SUCCEEDED, timeout=30,
             what="reconciliation's credit in the worker")
    assert cash_balance(org=owner.organization) == 12_000_000
    assert len(_credits_for(topup)) == 1


def test_declined_card_marks_the_topup_failed(stripe_env, webhook_to_live_server, member_factory,
                                              session_client_for):
    import stripe

    owner = member_factory(role="owner")
    topup = _create_topup(session_client_for(owner), "10.00")
    with pytest.raises(stripe.CardError):
        pay(topup.stripe_payment_intent_id, card=DECLINED_CARD)
    wait_for(lambda: TopUp.objects.get(pk=topup.pk).state == TopUpState.FAILED, what="payment_failed")
    topup.refresh_from_db()
    assert topup.failure_message and topup.credited_at is None
    assert cash_balance(org=owner.organization) == 0
    assert not _credits_for(topup)
