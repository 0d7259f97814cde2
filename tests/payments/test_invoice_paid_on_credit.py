"""Paying a postpaid invoice: the API's top-up, a real card payment at localstripe, its signed webhook to the
live server, and a real Celery worker settling the invoice as soon as the cash lands (no 5-minute wait)."""
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from billing.choices import AccountKind, TransferCode
from billing.credits import credit_limit_set
from billing.funds import balances_of, spend
from billing.models import Transfer
from billing.models_payments import TopUp
from billing.models_products import Invoice, InvoiceState
from billing.products.postpaid import invoice_issue
from core.models import OutboxMessage
from tests.factories.billing_products import posted_at
from tests.payments.conftest import pay, wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_invoice_is_paid_once_its_topup_is_credited(stripe_env, webhook_to_live_server, localstripe_url,
                                                    member_factory, session_client_for, start_worker):
    owner = member_factory(role="owner")
    org = owner.organization
    credit_limit_set(org=org, credit_limit=50_000_000)
    with posted_at(datetime(2025, 3, 31, 23, 0, tzinfo=ZoneInfo("Asia/Shanghai"))):
        spend(org=org, amount=12_345_678, key="march", code=TransferCode.METER)
    invoice = invoice_issue(org=org, year=2025, month=3)
    other = member_factory(role="owner").organization  # another postpaid org's open invoice stays open
    credit_limit_set(org=other, credit_limit=50_000_000)
    with posted_at(datetime(2025, 3, 31, 23, 0, tzinfo=ZoneInfo("Asia/Shanghai"))):
        spend(org=other, amount=1_000_000, key="other-march", code=TransferCode.METER)
    other_invoice = invoice_issue(org=other, year=2025, month=3)

    start_worker()
    response = session_client_for(owner).post(f"/api/v1/billing/invoices/{invoice.pk}/pay/", format="json")
    assert response.status_code in (200, 201), response.content
    topup = TopUp.objects.get(pk=response.json()["id"])
    assert topup.amount_fen == 1235  # 12.345678 CNY due, paid rounded up to the fen
    assert pay(topup.stripe_payment_intent_id).status == "succeeded"

    paid = wait_for(lambda: Invoice.objects.filter(pk=invoice.pk, state=InvoiceState.PAID).first(), timeout=30,
                    what="the worker to settle the invoice after the webhook's credit")
    assert paid.paid_at is not None
    assert OutboxMessage.objects.filter(task="billing.invoices_settle", kwargs={"org_id": str(org.pk)}).exists()
    rounding = Transfer.objects.get(code=TransferCode.ROUNDING)
    assert (rounding.key, rounding.amount) == (f"invoice_rounding:{invoice.pk}", 4_322)
    assert balances_of(org)[AccountKind.CASH] == 0  # exactly the invoice, the sub-fen rest to rounding
    assert Invoice.objects.get(pk=other_invoice.pk).state == InvoiceState.OPEN
