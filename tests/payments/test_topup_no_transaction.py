"""A top-up with an Idempotency-Key still calls Stripe with no transaction open (services.topup_create): the
key's one-transaction rule must not wrap a network call. Before, the whole view ran in one transaction, so
the PaymentIntent request held it open, and a Stripe failure rolled back the failed top-up and its audit
event."""
from unittest import mock

import pytest
import stripe
from django.db import connection

from billing.models_payments import TopUp, TopUpState

pytestmark = [pytest.mark.django_db(transaction=True)]
URL = "/api/v1/billing/topups/"


def test_stripe_is_called_outside_any_transaction_with_an_idempotency_key(stripe_env, member_factory,
                                                                         session_client_for):
    client = session_client_for(member_factory(role="owner"))
    real, seen = stripe.PaymentIntent.create, []

    def create(*args, **kwargs):
        seen.append(connection.in_atomic_block)
        return real(*args, **kwargs)

    with mock.patch.object(stripe.PaymentIntent, "create", create):
        r = client.post(URL, {"amount": "10.00"}, format="json", HTTP_IDEMPOTENCY_KEY="t-1")
    assert r.status_code == 201, r.content
    assert seen == [False]
    again = client.post(URL, {"amount": "10.00"}, format="json", HTTP_IDEMPOTENCY_KEY="t-1")
    assert again.json() == r.json() and TopUp.objects.count() == 1


def test_a_stripe_failure_keeps_the_failed_topup_with_an_idempotency_key(stripe_env, member_factory,
                                                                        session_client_for):
    client = session_client_for(member_factory(role="owner"))
    with mock.patch.object(stripe.PaymentIntent, "create", side_effect=stripe.APIConnectionError("down")):
        r = client.post(URL, {"amount": "10.00"}, format="json", HTTP_IDEMPOTENCY_KEY="t-2")
    assert r.status_code == 503, r.content
    assert list(TopUp.objects.values_list("state", flat=True)) == [TopUpState.FAILED]
