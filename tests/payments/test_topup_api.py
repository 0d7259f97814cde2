"""POST/GET /api/v1/billing/topups/: PaymentIntents at localstripe, roles, tenancy, validation, idempotency."""
import pytest
import stripe
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.models_payments import TopUp, TopUpState
from tests.payments.conftest import assert_error

pytestmark = pytest.mark.django_db

URL = "/api/v1/billing/topups/"


def _intent_ids() -> set[str]:
    return {pi.id for pi in stripe.PaymentIntent.list(limit=100).auto_paging_iter()}


def test_create_makes_a_cny_fen_payment_intent_with_our_metadata(stripe_env, member_factory, session_client_for):
    owner = member_factory(role="owner")
    response = session_client_for(owner).post(URL, {"amount": "123.45"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) >= {"id", "amount", "client_secret", "state"}
    assert body["amount"] == "123.450000" and body["state"] == "created"
    topup = TopUp.objects.get(pk=body["id"])
    assert topup.organization_id == owner.organization_id and topup.amount_fen == 12345
    intent = stripe.PaymentIntent.retrieve(topup.stripe_payment_intent_id)
    assert intent.amount == 12345 and intent.currency == "cny"
    assert intent.metadata["organization_id"] == str(owner.organization_id)
    assert intent.metadata["topup_id"] == str(topup.pk)
    assert body["client_secret"] == intent.client_secret


def test_same_idempotency_key_returns_same_topup_and_one_payment_intent(stripe_env, member_factory,
                                                                       session_client_for):
    client = session_client_for(member_factory(role="billing"))
    before = _intent_ids()
    first = client.post(URL, {"amount": "100.00"}, format="json", HTTP_IDEMPOTENCY_KEY="topup-retry-1")
    again = client.post(URL, {"amount": "100.00"}, format="json", HTTP_IDEMPOTENCY_KEY="topup-retry-1")
    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert TopUp.objects.count() == 1
    assert len(_intent_ids() - before) == 1
    # Another key is another top-up.
    other = client.post(URL, {"amount": "100.00"}, format="json", HTTP_IDEMPOTENCY_KEY="topup-retry-2")
    assert other.json()["id"] != first.json()["id"]
    assert len(_intent_ids() - before) == 2


@pytest.mark.parametrize("role,status", [("owner", 201), ("admin", 201), ("billing", 201),
                                         ("member", 403), ("viewer", 403)])
def test_who_may_create(stripe_env, member_factory, session_client_for, role, status):
    response = session_client_for(member_factory(role=role)).post(URL, {"amount": "50.00"}, format="json")
    assert response.status_code == status, response.content
    if status == 403:
        assert_error(response, 403, "permission_denied")
        assert TopUp.objects.count() == 0


@pytest.mark.parametrize("role,status", [("owner", 200), ("admin", 200), ("billing", 200), ("member", 200),
                                         ("viewer", 403)])
def test_who_may_read(member_factory, session_client_for, role, status):
    membership = member_factory(role=role)
    topup = TopUp.objects.create(organization=membership.organization, amount=10_000_000, amount_fen=1000)
    client = session_client_for(membership)
    assert client.get(URL).status_code == status
    assert client.get(f"{URL}{topup.pk}/").status_code == status


def test_anonymous_is_refused(api_client):
    assert_error(api_client.get(URL), 401, "not_authenticated")
    assert_error(api_client.post(URL, {"amount": "10.00"}, format="json"), 401, "not_authenticated")
    assert TopUp.objects.count() == 0


def test_other_organizations_topup_is_404(member_factory, session_client_for):
    mine, theirs = member_factory(role="owner"), member_factory(role="owner")
    their_topup = TopUp.objects.create(organization=theirs.organization, amount=10_000_000, amount_fen=1000)
    client = session_client_for(mine)
    assert_error(client.get(f"{URL}{their_topup.pk}/"), 404, "not_found")
    assert_error(client.get(f"{URL}not-a-uuid/"), 404, "not_found")
    assert client.get(URL).json()["count"] == 0
    assert session_client_for(theirs).get(f"{URL}{their_topup.pk}/").status_code == 200


@pytest.mark.parametrize("amount,field_message", [
    ("100.001", "Sub-fen"),          # sub-fen precision
    ("100.0000001", "decimal"),      # beyond µCNY
    ("abc", "decimal"),
    ("0.50", "between"),             # below TOPUP_MIN_UCNY (1.00 in these tests)
    ("-5.00", "negative"),
    ("100000000.00", "between"),     # above TOPUP_MAX_UCNY
    ("1e999999", "too large"),       # an exponent that would overflow once scaled to µCNY
    (None, ""),
])
def test_bad_amounts_are_400_with_details(stripe_env, member_factory, session_client_for, amount, field_message):
    client = session_client_for(member_factory(role="owner"))
    body = {} if amount is None else {"amount": amount}
    err = assert_error(client.post(URL, body, format="json"), 400, "validation_error")
    assert "amount" in err["details"]
    assert field_message.lower() in " ".join(err["details"]["amount"]).lower()
    assert TopUp.objects.count() == 0


def test_six_decimal_whole_fen_amount_is_accepted(stripe_env, member_factory, session_client_for):
    response = session_client_for(member_factory(role="owner")).post(URL, {"amount": "10.500000"}, format="json")
    assert response.status_code == 201 and TopUp.objects.get().amount_fen == 1050


def test_list_query_count_does_not_grow(member_factory, session_client_for):
    membership = member_factory(role="owner")
    client = session_client_for(membership)

    def count_for(n):
        TopUp.objects.filter(organization=membership.organization).delete()
        TopUp.objects.bulk_create([TopUp(organization=membership.organization, amount=10_000_000, amount_fen=1000)
                                   for _ in range(n)])
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(URL)
        assert response.json()["count"] == n and len(response.json()["results"]) == n
        return len(ctx.captured_queries)

    assert count_for(2) == count_for(50)


def test_client_secret_is_hidden_once_settled(member_factory, session_client_for):
    membership = member_factory(role="owner")
    topup = TopUp.objects.create(organization=membership.organization, amount=10_000_000, amount_fen=1000,
                                 client_secret="pi_x_secret_y", stripe_payment_intent_id="pi_x")
    client = session_client_for(membership)
    assert client.get(f"{URL}{topup.pk}/").json()["client_secret"] == "pi_x_secret_y"
    TopUp.objects.filter(pk=topup.pk).update(state=TopUpState.SUCCEEDED)
    assert client.get(f"{URL}{topup.pk}/").json()["client_secret"] is None


def test_keys_and_secrets_are_never_logged(stripe_env, member_factory, session_client_for, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    client = session_client_for(member_factory(role="owner"))
    assert client.post(URL, {"amount": "10.00"}, format="json").status_code == 201
    body = b'{"id": "evt_log", "type": "payment_intent.succeeded", "data": {"object": {"id": "pi_nope"}}}'
    from tests.payments.conftest import sign

    client.post("/api/v1/billing/stripe/webhook/", data=body, content_type="application/json",
                HTTP_STRIPE_SIGNATURE=sign(body, "whsec_wrong"))
    text = "\n".join(r.getMessage() + str(r.__dict__) for r in caplog.records)
    assert caplog.records
    assert stripe_env.STRIPE_API_KEY not in text and stripe_env.STRIPE_WEBHOOK_SECRET not in text
