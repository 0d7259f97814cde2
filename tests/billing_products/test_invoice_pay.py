"""Paying an invoice: a top-up of the amount rounded up to the fen at localstripe; settling posts the
sub-fen difference once between cash and `rounding`."""
import threading
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import stripe
from django.utils import timezone

from billing.choices import AccountKind, TransferCode
from billing.credits import cash_credit
from billing.funds import balances_of, spend
from billing.models import Transfer
from billing.models_payments import TopUp
from billing.models_products import Invoice, InvoiceState
from billing.payments.reconcile import payments_reconcile
from billing.products.postpaid import invoice_issue, invoices_settle_due
from tests.core.test_api_conventions import assert_error
from tests.factories.billing import fund, set_credit_limit
from tests.factories.billing_products import posted_at
from tests.payments.conftest import localstripe_url, pay, stripe_env  # noqa: F401  (fixtures)
from tests.races import Aside

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("role,status", [("owner", 201), ("billing", 201), ("member", 403), ("viewer", 403)])
def test_pay_creates_a_topup_rounded_up_to_the_fen(stripe_env, member_factory, session_client_for,  # noqa: F811
                                                   role, status):
    membership = member_factory(role=role)
    org = membership.organization
    set_credit_limit(org, 100_000_000)
    invoice = Invoice.objects.create(organization=org, period=date(2025, 1, 1), amount_due=12_345_678)
    response = session_client_for(membership).post(f"/api/v1/billing/invoices/{invoice.pk}/pay/")
    if status == 403:
        assert_error(response, 403, "permission_denied")
        return
    assert response.status_code == 201, response.content
    topup = TopUp.objects.get(pk=response.json()["id"])
    assert topup.amount == 12_350_000 and topup.amount_fen == 1235
    assert stripe.PaymentIntent.retrieve(topup.stripe_payment_intent_id).amount == 1235
    invoice.refresh_from_db()
    assert invoice.topup_id == topup.pk and invoice.state == InvoiceState.OPEN
    # The payment lands (the webhook's ledger effect, then the top-up row), then the settle task runs twice.
    fund(org, 12_350_000, key=f"stripe_pi:{topup.stripe_payment_intent_id}")
    TopUp.objects.filter(pk=topup.pk).update(credited_at=timezone.now(), state="succeeded")
    assert invoices_settle_due() == 1 and invoices_settle_due() == 0
    invoice.refresh_from_db()
    assert invoice.state == InvoiceState.PAID
    rounding = Transfer.objects.get(code=TransferCode.ROUNDING)
    assert rounding.key == f"invoice_rounding:{invoice.pk}" and rounding.amount == 4_322
    assert balances_of(org)[AccountKind.CASH] == 12_345_678
    paid_again = session_client_for(membership).post(f"/api/v1/billing/invoices/{invoice.pk}/pay/")
    assert_error(paid_again, 409, "invalid_state")


def test_an_invoice_below_the_smallest_topup_is_paid_with_it_and_the_rest_stays(  # noqa: F811
        stripe_env, member_factory, session_client_for, settings):  # noqa: F811
    settings.TOPUP_MIN_UCNY = 10_000_000
    membership = member_factory(role="owner")
    org = membership.organization
    set_credit_limit(org, 100_000_000)
    invoice = Invoice.objects.create(organization=org, period=date(2025, 2, 1), amount_due=3_456_789)
    client = session_client_for(membership)
    listed = client.get("/api/v1/billing/invoices/").json()["results"]
    assert [(i["amount_due"], i["pay_amount"]) for i in listed] == [("3.456789", "10.000000")]
    response = client.post(f"/api/v1/billing/invoices/{invoice.pk}/pay/")
    assert response.status_code == 201, response.content
    topup = TopUp.objects.get(pk=response.json()["id"])
    assert topup.amount_fen == 1000
    assert stripe.PaymentIntent.retrieve(topup.stripe_payment_intent_id).amount == 1000
    fund(org, 10_000_000, key=f"stripe_pi:{topup.stripe_payment_intent_id}")
    TopUp.objects.filter(pk=topup.pk).update(credited_at=timezone.now(), state="succeeded")
    assert invoices_settle_due() == 1
    # Only the sub-fen part goes to rounding (3.46 − 3.456789); the other 6.54 CNY stays the customer's.
    assert Transfer.objects.get(code=TransferCode.ROUNDING).amount == 3_211
    assert balances_of(org)[AccountKind.CASH] == 10_000_000 - 3_211


def test_an_invoice_above_the_largest_card_payment_says_so(stripe_env, member_factory,  # noqa: F811
                                                         session_client_for, settings):
    settings.TOPUP_MAX_UCNY = 100_000_000_000
    membership = member_factory(role="owner")
    set_credit_limit(membership.organization, 500_000_000_000)
    invoice = Invoice.objects.create(organization=membership.organization, period=date(2025, 3, 1),
                                     amount_due=200_000_000_000)
    response = session_client_for(membership).post(f"/api/v1/billing/invoices/{invoice.pk}/pay/")
    error = assert_error(response, 400, "validation_error")
    assert "bank transfer" in error["message"] and "amount_due" in error["details"]
    assert not TopUp.objects.exists()


def test_paying_twice_reuses_the_pending_topup_and_an_earlier_payment_still_settles(
        stripe_env, member_factory, session_client_for):  # noqa: F811
    """Two clicks make one payment; once part was paid otherwise the next click asks only the rest; and if the
    customer then completes the earlier payment anyway, that settles the invoice (rounding posted once)."""
    membership = member_factory(role="owner")
    org = membership.organization
    set_credit_limit(org, 100_000_000)
    with posted_at(datetime(2025, 4, 20, tzinfo=ZoneInfo("Asia/Shanghai"))):
        spend(org=org, amount=12_345_678, key="april", code=TransferCode.METER)
    invoice = invoice_issue(org=org, year=2025, month=4)
    client = session_client_for(membership)
    first = client.post(f"/api/v1/billing/invoices/{invoice.pk}/pay/")
    again = client.post(f"/api/v1/billing/invoices/{invoice.pk}/pay/")
    assert first.status_code == again.status_code == 201, (first.content, again.content)
    assert again.json()["id"] == first.json()["id"] and again.json()["client_secret"] == first.json()["client_secret"]
    assert TopUp.objects.filter(organization=org).count() == 1
    earlier = TopUp.objects.get(pk=first.json()["id"])
    assert earlier.amount == 12_350_000

    # 5 CNY paid by an ordinary top-up: the invoice now asks the rest, with a new payment of that amount.
    cash_credit(org=org, amount=5_000_000, key="ordinary", code=TransferCode.TOPUP)
    listed = client.get("/api/v1/billing/invoices/").json()["results"][0]
    assert (listed["amount_due"], listed["amount_outstanding"], listed["pay_amount"]) == (
        "12.345678", "7.345678", "7.350000")
    later = client.post(f"/api/v1/billing/invoices/{invoice.pk}/pay/")
    assert later.status_code == 201 and later.json()["id"] != earlier.pk and later.json()["amount"] == "7.350000"
    TopUp.objects.filter(pk=later.json()["id"]).update(state="processing")  # as payment_intent.processing sets it
    assert_error(client.post(f"/api/v1/billing/invoices/{invoice.pk}/pay/"), 409, "invalid_state")

    # The customer completes the earlier payment at Stripe; reconciliation credits it through the webhook's path.
    assert pay(earlier.stripe_payment_intent_id).status == "succeeded"
    assert payments_reconcile().get("credited") == 1
    assert invoices_settle_due(org_id=org.pk) == 1 and invoices_settle_due(org_id=org.pk) == 0
    invoice.refresh_from_db()
    assert invoice.state == InvoiceState.PAID
    rounding = Transfer.objects.get(code=TransferCode.ROUNDING)
    assert (rounding.key, rounding.amount) == (f"invoice_rounding:{invoice.pk}", 4_322)
    assert balances_of(org)[AccountKind.CASH] == 5_000_000  # the whole-fen surplus stays the customer's
    assert_error(client.post(f"/api/v1/billing/invoices/{invoice.pk}/pay/"), 409, "invalid_state")


def test_a_superseded_invoice_cannot_be_paid_and_lists_nothing_to_pay(stripe_env, member_factory,  # noqa: F811
                                                                     session_client_for):
    membership = member_factory(role="owner")
    org = membership.organization
    set_credit_limit(org, 100_000_000)
    tz = ZoneInfo("Asia/Shanghai")
    with posted_at(datetime(2025, 7, 20, tzinfo=tz)):
        spend(org=org, amount=10_000_000, key="july", code=TransferCode.METER)
    july = invoice_issue(org=org, year=2025, month=7)
    with posted_at(datetime(2025, 8, 20, tzinfo=tz)):
        spend(org=org, amount=2_000_000, key="august", code=TransferCode.METER)
    august = invoice_issue(org=org, year=2025, month=8)
    client = session_client_for(membership)
    listed = {i["period"]: (i["state"], i["amount_due"], i["amount_outstanding"], i["pay_amount"])
              for i in client.get("/api/v1/billing/invoices/").json()["results"]}
    assert listed == {"2025-08": ("open", "12.000000", "12.000000", "12.000000"),
                      "2025-07": ("superseded", "10.000000", "0.000000", "0.000000")}
    error = assert_error(client.post(f"/api/v1/billing/invoices/{july.pk}/pay/"), 409, "invalid_state")
    assert "later month" in error["message"]
    assert client.post(f"/api/v1/billing/invoices/{august.pk}/pay/").json()["amount"] == "12.000000"


def _first_pay_inside_stripe(member_factory, session_client_for, monkeypatch):
    """An owner's open invoice, and a first Pay (aside) that waits inside its Stripe call until `second_done` is
    set. → (org, invoice, 3 clients, the pay url, the top-up ids Stripe was called for, the first Pay, second_done)"""
    membership = member_factory(role="owner")
    org = membership.organization
    set_credit_limit(org, 100_000_000)
    invoice = Invoice.objects.create(organization=org, period=date(2025, 1, 1), amount_due=12_345_678)
    clients = [session_client_for(membership) for _ in range(3)]
    create, calls = stripe.PaymentIntent.create, []
    first_in, second_done = threading.Event(), threading.Event()

    def paused_create(**kwargs):
        calls.append(kwargs["metadata"]["topup_id"])
        if not first_in.is_set():
            first_in.set()
            second_done.wait(10)
        return create(**kwargs)

    monkeypatch.setattr(stripe.PaymentIntent, "create", paused_create)
    url = f"/api/v1/billing/invoices/{invoice.pk}/pay/"
    first = Aside(lambda: clients[0].post(url))
    assert first_in.wait(10)
    return org, invoice, clients, url, calls, first, second_done


@pytest.mark.django_db(transaction=True)
def test_two_simultaneous_pays_make_one_payable_topup(stripe_env, member_factory, session_client_for,  # noqa: F811
                                                      monkeypatch):
    """The second Pay arrives while the first waits for Stripe: the invoice's row lock has already given the
    invoice its top-up, so the second makes none (409 while the first is being started), and once it is started
    every Pay returns that one top-up: one PaymentIntent, never two the customer could both complete."""
    org, invoice, clients, url, calls, first, second_done = _first_pay_inside_stripe(
        member_factory, session_client_for, monkeypatch)
    second = Aside(lambda: clients[1].post(url))
    second_response = second.result(20)
    second_done.set()
    first_response = first.result(20)
    assert TopUp.objects.filter(organization=org).count() == 1, second_response.content  # was: two payable
    assert first_response.status_code == 201, first_response.content
    assert "being started" in assert_error(second_response, 409, "invalid_state")["message"]
    topup = TopUp.objects.get(organization=org)
    assert calls == [str(topup.pk)] and first_response.json()["id"] == str(topup.pk)
    invoice.refresh_from_db()
    assert invoice.topup_id == topup.pk
    again = clients[2].post(url)
    assert again.status_code == 201 and again.json()["id"] == str(topup.pk)
    assert again.json()["client_secret"] == first_response.json()["client_secret"] == topup.client_secret
    assert calls == [str(topup.pk)]


def _dead_start(org, invoice, *, age_seconds: float):
    """What a Pay request killed between its top-up row and its PaymentIntent leaves: the invoice's top-up row,
    committed without a PaymentIntent, made `age_seconds` ago, and no request holding it any more."""
    dead = TopUp.objects.create(organization=org, amount=12_350_000, amount_fen=1235)
    TopUp.objects.filter(pk=dead.pk).update(created_at=timezone.now() - timedelta(seconds=age_seconds))
    Invoice.objects.filter(pk=invoice.pk).update(topup_id=dead.pk)
    return dead


@pytest.fixture
def intent_calls(monkeypatch):
    """Every PaymentIntent.create call's keyword arguments (the call itself goes on to localstripe)."""
    create, calls = stripe.PaymentIntent.create, []

    def recorded(**kwargs):
        calls.append(kwargs)
        return create(**kwargs)

    monkeypatch.setattr(stripe.PaymentIntent, "create", recorded)
    return calls


def test_a_payment_whose_request_died_before_stripe_answered_is_taken_over_by_the_next_pay(  # noqa: F811
        stripe_env, member_factory, session_client_for, intent_calls):  # noqa: F811
    """A request killed between the top-up row and its PaymentIntent left nobody the client secret; nobody holds
    the row any more, so the next Pay (seconds later, not 5 minutes) starts that same top-up: the same Stripe
    idempotency key as the dead request's call, so if that call had reached Stripe the same PaymentIntent comes
    back, and the customer is never asked for two payments."""
    membership = member_factory(role="owner")
    org = membership.organization
    set_credit_limit(org, 100_000_000)
    invoice = Invoice.objects.create(organization=org, period=date(2025, 1, 1), amount_due=12_345_678)
    dead = _dead_start(org, invoice, age_seconds=30)
    client = session_client_for(membership)
    url = f"/api/v1/billing/invoices/{invoice.pk}/pay/"
    response = client.post(url)
    assert response.status_code == 201, response.content  # was: 409 "being started" for 5 minutes
    assert response.json()["id"] == str(dead.pk) and response.json()["client_secret"]
    dead.refresh_from_db()
    assert dead.stripe_payment_intent_id and dead.client_secret == response.json()["client_secret"]
    intent = stripe.PaymentIntent.retrieve(dead.stripe_payment_intent_id)
    assert intent.amount == 1235 and intent.metadata["topup_id"] == str(dead.pk)
    assert [c["idempotency_key"] for c in intent_calls] == [f"cardmix-topup-{dead.pk}"]
    assert TopUp.objects.filter(organization=org).count() == 1
    invoice.refresh_from_db()
    assert invoice.topup_id == dead.pk
    again = client.post(url)
    assert again.status_code == 201 and again.json()["id"] == str(dead.pk)
    assert again.json()["client_secret"] == response.json()["client_secret"] and len(intent_calls) == 1
    from billing.products.postpaid import INVOICE_PAY_TAKEOVER_GRACE_SECONDS

    assert INVOICE_PAY_TAKEOVER_GRACE_SECONDS < 30  # seconds: the 30 s old row above was past it


def test_a_row_just_made_waits_out_the_grace(stripe_env, member_factory, session_client_for,  # noqa: F811
                                             intent_calls):
    """Within the grace a row without its PaymentIntent is left to its request, lock or not (a request of a
    version without the lock during a rolling deploy)."""
    membership = member_factory(role="owner")
    org = membership.organization
    set_credit_limit(org, 100_000_000)
    invoice = Invoice.objects.create(organization=org, period=date(2025, 1, 1), amount_due=12_345_678)
    _dead_start(org, invoice, age_seconds=0)
    response = session_client_for(membership).post(f"/api/v1/billing/invoices/{invoice.pk}/pay/")
    assert "being started" in assert_error(response, 409, "invalid_state")["message"]
    assert intent_calls == [] and TopUp.objects.filter(organization=org).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_live_request_still_waiting_on_stripe_is_never_taken_over_however_long_it_waits(
        stripe_env, member_factory, session_client_for, monkeypatch):  # noqa: F811
    """The first Pay is still inside its Stripe call when its row is older than any fixed window (10 minutes):
    a second Pay answers 409 and makes nothing, however old the row, while that request lives."""
    org, invoice, clients, url, calls, first, second_done = _first_pay_inside_stripe(
        member_factory, session_client_for, monkeypatch)
    TopUp.objects.filter(organization=org).update(created_at=timezone.now() - timedelta(minutes=10))
    second = Aside(lambda: clients[1].post(url))
    second_response = second.result(20)
    second_done.set()
    first_response = first.result(20)
    assert TopUp.objects.filter(organization=org).count() == 1, second_response.content  # was: a second one
    assert "being started" in assert_error(second_response, 409, "invalid_state")["message"]
    assert first_response.status_code == 201, first_response.content
    topup = TopUp.objects.get(organization=org)
    assert calls == [str(topup.pk)]
    again = clients[2].post(url)
    assert again.status_code == 201 and again.json()["id"] == str(topup.pk) and calls == [str(topup.pk)]


@pytest.mark.django_db(transaction=True)
def test_two_pays_after_a_dead_request_take_it_over_once(stripe_env, member_factory, session_client_for,  # noqa: F811
                                                         monkeypatch):
    """Two Pays arrive after a request died: the first takes the dead row over (and waits inside Stripe), the
    second answers 409 while it does: one PaymentIntent, on the dead request's row."""
    membership = member_factory(role="owner")
    org = membership.organization
    set_credit_limit(org, 100_000_000)
    invoice = Invoice.objects.create(organization=org, period=date(2025, 1, 1), amount_due=12_345_678)
    dead = _dead_start(org, invoice, age_seconds=60)
    clients = [session_client_for(membership) for _ in range(3)]
    create, calls = stripe.PaymentIntent.create, []
    first_in, second_done = threading.Event(), threading.Event()

    def paused_create(**kwargs):
        calls.append(kwargs["idempotency_key"])
        if not first_in.is_set():
            first_in.set()
            second_done.wait(10)
        return create(**kwargs)

    monkeypatch.setattr(stripe.PaymentIntent, "create", paused_create)
    url = f"/api/v1/billing/invoices/{invoice.pk}/pay/"
    first = Aside(lambda: clients[0].post(url))
    assert first_in.wait(10), "the first Pay did not take the dead row over"  # was: 409 for 5 minutes
    second_response = Aside(lambda: clients[1].post(url)).result(20)
    second_done.set()
    first_response = first.result(20)
    assert "being started" in assert_error(second_response, 409, "invalid_state")["message"]
    assert first_response.status_code == 201 and first_response.json()["id"] == str(dead.pk)
    assert calls == [f"cardmix-topup-{dead.pk}"]
    assert list(TopUp.objects.filter(organization=org).values_list("pk", flat=True)) == [dead.pk]
    again = clients[2].post(url)
    assert again.status_code == 201 and again.json()["id"] == str(dead.pk) and len(calls) == 1
