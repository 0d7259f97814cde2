"""The console top-up page in headless Chromium, with localstripe's Stripe.js stand-in: card Element,
confirmCardPayment (localstripe's 3-D Secure modal), and the balance appearing once the webhook lands."""
import pytest
import stripe
from django.conf import settings as django_settings
from django.db import connections

from billing.models_payments import TopUp, TopUpState
from billing.payments.selectors import cash_balance
from tests.factories.tenancy import session_key_for as _session_cookie
from tests.payments.conftest import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

THREE_D_SECURE_CARD = {"number": "4000002500003155", "exp_month": 12, "exp_year": 2034, "cvc": "123"}



def test_card_payment_in_the_browser_credits_and_shows_the_new_balance(
        stripe_env, webhook_to_live_server, live_server, localstripe_url, member_factory, monkeypatch):
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # the ORM is used between browser steps
    stripe_env.STRIPE_JS_URL = f"{localstripe_url}/js.stripe.com/v3/"
    stripe_env.STRIPE_PUBLISHABLE_KEY = "pk_test_cardmix_browser"
    owner = member_factory(role="owner")
    cookie = {"name": django_settings.SESSION_COOKIE_NAME, "value": _session_cookie(owner), "url": live_server.url}

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            context = browser.new_context()
            context.add_cookies([cookie])
            page = context.new_page()
            logs: list[str] = []
            page.on("console", lambda msg: logs.append(msg.text))
            page.on("requestfinished", lambda r: logs.append(f"{r.method} {r.url}"))
            page.on("requestfailed", lambda r: logs.append(f"FAILED {r.method} {r.url} {r.failure}"))
            page.goto(f"{live_server.url}/billing/topup/")
            page.fill("#topup-amount", "25.00")
            page.wait_for_selector("#card-element input[placeholder=number]")
            page.fill("#card-element input[placeholder=number]", THREE_D_SECURE_CARD["number"])
            page.click("button[data-method=card]")

            # Our API created the top-up and its PaymentIntent; Stripe.js now asks for 3-D Secure.
            topup = wait_for(lambda: TopUp.objects.filter(organization=owner.organization,
                                                          stripe_payment_intent_id__isnull=False).first(),
                             what="the top-up created by the page")
            assert topup.amount_fen == 2500
            page.wait_for_selector("text=Complete authentication")
            # localstripe's stand-in does not send the card Element's data; attach the card as Stripe would.
            method = stripe.PaymentMethod.create(type="card", card=THREE_D_SECURE_CARD)
            stripe.PaymentIntent.modify(topup.stripe_payment_intent_id, payment_method=method.id)
            assert stripe.PaymentIntent.retrieve(topup.stripe_payment_intent_id).confirm().status == "requires_action"
            page.click("text=Complete authentication")

            try:
                page.wait_for_selector("#topup-status[data-state=succeeded]", timeout=20_000)
            except Exception as exc:  # say what the browser did
                raise AssertionError(f"no credit shown; browser log: {logs}") from exc
            assert page.inner_text("#cash-balance") == "¥25.00"
            assert page.inner_text("#topup-error") == ""
        finally:
            browser.close()
            # Inside playwright's event loop Django keeps a separate, context-local connection: close it,
            # or it blocks dropping the test database at the end of the run.
            connections.close_all()
    topup.refresh_from_db()
    assert topup.state == TopUpState.SUCCEEDED and cash_balance(org=owner.organization) == 25_000_000


def test_paying_an_invoice_in_the_browser_marks_it_paid(
        stripe_env, webhook_to_live_server, live_server, localstripe_url, member_factory, monkeypatch, start_worker):
    """Invoices → Pay → the card flow with the amount fixed → webhook credit → the worker settles the invoice."""
    from datetime import date

    from playwright.sync_api import sync_playwright

    from billing.credits import credit_limit_set
    from billing.models_products import Invoice, InvoiceState

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    stripe_env.STRIPE_JS_URL = f"{localstripe_url}/js.stripe.com/v3/"
    stripe_env.STRIPE_PUBLISHABLE_KEY = "pk_test_cardmix_browser"
    owner = member_factory(role="owner")
    credit_limit_set(org=owner.organization, credit_limit=50_000_000)
    invoice = Invoice.objects.create(organization=owner.organization, period=date(2025, 6, 1), amount_due=12_345_678)
    start_worker()
    cookie = {"name": django_settings.SESSION_COOKIE_NAME, "value": _session_cookie(owner), "url": live_server.url}

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            context = browser.new_context()
            context.add_cookies([cookie])
            page = context.new_page()
            page.goto(f"{live_server.url}/billing/invoices/")
            page.click(f"a[href*='?invoice={invoice.pk}']")
            page.wait_for_selector("text=Pay invoice 2025-06")
            assert page.input_value("#topup-amount") == "12.35"
            page.wait_for_selector("#card-element input[placeholder=number]")
            page.fill("#card-element input[placeholder=number]", THREE_D_SECURE_CARD["number"])
            page.click("button[data-method=card]")
            topup = wait_for(lambda: TopUp.objects.filter(organization=owner.organization,
                                                          stripe_payment_intent_id__isnull=False).first(),
                             what="the top-up the invoice's pay endpoint created")
            assert topup.amount_fen == 1235
            assert Invoice.objects.get(pk=invoice.pk).topup_id == topup.pk
            page.wait_for_selector("text=Complete authentication")
            method = stripe.PaymentMethod.create(type="card", card=THREE_D_SECURE_CARD)
            stripe.PaymentIntent.modify(topup.stripe_payment_intent_id, payment_method=method.id)
            assert stripe.PaymentIntent.retrieve(topup.stripe_payment_intent_id).confirm().status == "requires_action"
            page.click("text=Complete authentication")
            page.wait_for_selector("#topup-status[data-state=succeeded]", timeout=20_000)
            wait_for(lambda: Invoice.objects.get(pk=invoice.pk).state == InvoiceState.PAID, timeout=30,
                     what="the worker to settle the invoice")
            page.goto(f"{live_server.url}/billing/invoices/")
            assert page.inner_text("[data-invoice-state]") == "paid"
            assert page.locator("a[href*='?invoice=']").count() == 0
        finally:
            browser.close()
            connections.close_all()
    assert cash_balance(org=owner.organization) == 12_350_000 - 4_322  # the sub-fen rest went to rounding


def test_without_stripe_js_the_page_says_so_and_never_posts(stripe_env, live_server, member_factory, monkeypatch):
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    stripe_env.STRIPE_JS_URL = "https://js.stripe.invalid/v3/"  # unreachable, as on a network without Stripe
    owner = member_factory(role="owner")
    cookie = {"name": django_settings.SESSION_COOKIE_NAME, "value": _session_cookie(owner), "url": live_server.url}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            context = browser.new_context()
            context.route("https://js.stripe.invalid/**", lambda route: route.abort())
            context.add_cookies([cookie])
            page = context.new_page()
            posts: list[str] = []
            page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
            page.goto(f"{live_server.url}/billing/topup/")
            page.wait_for_selector("#topup-error:not([hidden])")
            assert "unavailable" in page.inner_text("#topup-error")
            assert page.is_disabled("button[data-method=card]")
            page.fill("#topup-amount", "25.00")
            page.press("#topup-amount", "Enter")  # implicit submission is blocked by the disabled button
            page.wait_for_timeout(500)
            assert page.url == f"{live_server.url}/billing/topup/" and posts == []
            assert not TopUp.objects.filter(organization=owner.organization).exists()
        finally:
            browser.close()
