"""Refunds: the admin action calls Stripe (localstripe), capped by the remaining capture; charge.refunded
debits exactly the change in the cumulative amount refunded, once. localstripe sends no refund events,
so the test signs them with the endpoint secret from localstripe's own charge object."""
import json
import time

import pytest
import stripe
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.models import Transfer
from billing.models_payments import TopUp, TopUpState
from billing.payments.selectors import cash_balance
from billing.payments.services import topup_refund
from billing.payments.stripe_client import as_dict
from billing.services import cash_debit
from core.errors import ValidationFailed
from tests.factories.tenancy import UserFactory
from tests.payments.conftest import pay, post_raw, sign, wait_for
from tests.races import assert_organization_not_row_locked

pytestmark = [pytest.mark.django_db(transaction=True)]


def _paid_topup(client, amount="100.00") -> TopUp:
    response = client.post("/api/v1/billing/topups/", {"amount": amount}, format="json")
    assert response.status_code == 201, response.content
    topup = TopUp.objects.get(pk=response.json()["id"])
    pay(topup.stripe_payment_intent_id)
    wait_for(lambda: TopUp.objects.get(pk=topup.pk).state == TopUpState.SUCCEEDED, what="the credit")
    topup.refresh_from_db()
    return topup


def _refund_event(topup, event_id: str) -> bytes:
    """charge.refunded for the charge as localstripe now has it (cumulative amount_refunded)."""
    charge = as_dict(stripe.Charge.retrieve(topup.stripe_charge_id))
    return json.dumps({"id": event_id, "object": "event", "type": "charge.refunded", "created": int(time.time()),
                       "data": {"object": charge}}).encode()


def _stripe_refunded(topup) -> int:
    return sum(r.amount for r in stripe.Refund.list(charge=topup.stripe_charge_id).auto_paging_iter())


def _admin_refund(client, topup, amount: str):
    return client.post("/admin/billing/topup/", {"action": "refund", "_selected_action": [str(topup.pk)],
                                                 "apply": "1", "amount": amount}, follow=True)


@pytest.fixture
def staff_client(client):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def test_partial_refund_debits_exactly_that_part_once(stripe_env, webhook_to_live_server, member_factory,
                                                      session_client_for, staff_client):
    owner = member_factory(role="owner")
    org = owner.organization
    topup = _paid_topup(session_client_for(owner))
    assert topup.stripe_charge_id.startswith("ch_") and cash_balance(org=org) == 100_000_000

    # Above what was captured: refused, nothing sent to Stripe.
    with pytest.raises(ValidationFailed), CaptureQueriesContext(connection) as queries:
        topup_refund(topup_id=topup.pk, amount_fen=10001)
    assert_organization_not_row_locked(queries)  # the lock is held across the Stripe call
    page = _admin_refund(staff_client, topup, "100.01")
    assert "Refund refused" in page.content.decode()
    assert _stripe_refunded(topup) == 0

    # The admin form first shows what is refundable.
    form = staff_client.post("/admin/billing/topup/", {"action": "refund", "_selected_action": [str(topup.pk)]})
    assert form.status_code == 200 and "100.000000 CNY" in form.content.decode()

    page = _admin_refund(staff_client, topup, "30.00")
    assert "requested at Stripe" in page.content.decode()
    assert _stripe_refunded(topup) == 3000
    assert cash_balance(org=org) == 100_000_000  # the ledger moves on Stripe's event, not on the request

    # Only 70.00 remain refundable, counting the refund still in flight.
    with pytest.raises(ValidationFailed):
        topup_refund(topup_id=topup.pk, amount_fen=7001)

    body = _refund_event(topup, "evt_refund_30")
    for _ in range(3):  # delivered and replayed
        status, _answer = post_raw(webhook_to_live_server, body, sign(body, stripe_env.STRIPE_WEBHOOK_SECRET))
        assert status == 200
    assert cash_balance(org=org) == 70_000_000
    debits = Transfer.objects.filter(key=f"stripe_refund:{topup.stripe_charge_id}:3000")
    assert [t.amount for t in debits] == [30_000_000]
    # Another event id carrying the same cumulative amount changes nothing.
    same = _refund_event(topup, "evt_refund_30_again")
    status, answer = post_raw(webhook_to_live_server, same, sign(same, stripe_env.STRIPE_WEBHOOK_SECRET))
    assert status == 200 and json.loads(answer)["outcome"] == "stale"

    # The rest: 70.00; an older event arriving afterwards changes nothing.
    topup_refund(topup_id=topup.pk, amount_fen=7000)
    full = _refund_event(topup, "evt_refund_100")
    assert post_raw(webhook_to_live_server, full, sign(full, stripe_env.STRIPE_WEBHOOK_SECRET))[0] == 200
    status, answer = post_raw(webhook_to_live_server, body, sign(body.replace(b"evt_refund_30", b"evt_refund_30b"),
                                                                 stripe_env.STRIPE_WEBHOOK_SECRET))
    assert status == 400  # a body changed after signing is refused...
    late = body.replace(b"evt_refund_30", b"evt_refund_30_late")
    status, answer = post_raw(webhook_to_live_server, late, sign(late, stripe_env.STRIPE_WEBHOOK_SECRET))
    assert status == 200 and json.loads(answer)["outcome"] == "stale"  # ...and a stale one changes nothing
    topup.refresh_from_db()
    assert cash_balance(org=org) == 0
    assert topup.state == TopUpState.REFUNDED and topup.refunded_fen == 10000
    assert sum(Transfer.objects.filter(code="refund", payment_ref=topup.stripe_charge_id)
               .values_list("amount", flat=True)) == 100_000_000
    with pytest.raises(ValidationFailed):
        topup_refund(topup_id=topup.pk, amount_fen=1)
    assert _stripe_refunded(topup) == 10000


def test_refund_taking_cash_below_zero_flags_operators(stripe_env, webhook_to_live_server, member_factory,
                                                       session_client_for):
    owner = member_factory(role="owner")
    org = owner.organization
    topup = _paid_topup(session_client_for(owner))
    cash_debit(org=org, amount=80_000_000, key=f"test-spend:{org.pk}", code="adjustment")  # spent meanwhile
    topup_refund(topup_id=topup.pk, amount_fen=5000)
    body = _refund_event(topup, "evt_refund_neg")
    status, _ = post_raw(webhook_to_live_server, body, sign(body, stripe_env.STRIPE_WEBHOOK_SECRET))
    assert status == 200
    topup.refresh_from_db()
    assert cash_balance(org=org) == -30_000_000
    assert topup.needs_review and "-30.000000" in topup.review_reason
