"""Console top-up page and its htmx status partial (server-rendered; the browser flow is in test_browser_topup)."""
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.models_payments import TopUp, TopUpState
from billing.services import cash_credit
from tests.factories.tenancy import login_client as console_for

pytestmark = pytest.mark.django_db

PAGE = "/billing/topup/"



def test_page_loads_stripe_js_from_settings_and_mounts_a_card_element(member_factory, settings):
    settings.STRIPE_JS_URL = "http://127.0.0.1:9/js.stripe.com/v3/"
    settings.STRIPE_PUBLISHABLE_KEY = "pk_test_console"
    settings.STRIPE_API_KEY = "sk_test_console"  # an account's keys: payments can work
    html = console_for(member_factory(role="billing")).get(PAGE).content.decode()
    assert '<script src="http://127.0.0.1:9/js.stripe.com/v3/"></script>' in html
    assert "/static/js/topup.js" in html and 'id="card-element"' in html
    assert 'data-publishable-key="pk_test_console"' in html
    assert 'data-api-url="/api/v1/billing/topups/"' in html
    assert "Alipay" not in html and "WeChat Pay" not in html
    # Only Stripe.js is external: every other script is served by the app.
    scripts = [line for line in html.splitlines() if "<script src=" in line]
    # Local scripts only (and Stripe.js): static files and the same-origin translation catalog (/jsi18n/).
    assert all("/static/" in s or "js.stripe.com" in s or 'src="/jsi18n/"' in s for s in scripts), scripts


def test_alipay_and_wechat_buttons_when_enabled(member_factory, settings):
    settings.STRIPE_EXTRA_PAYMENT_METHODS = ["alipay", "wechat_pay"]
    html = console_for(member_factory(role="owner")).get(PAGE).content.decode()
    assert 'data-method="alipay"' in html and 'data-method="wechat_pay"' in html


def test_js_is_served_by_the_app(client):
    response = client.get("/static/js/topup.js")
    assert response.status_code == 200
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert b"confirmCardPayment" in body and b"Idempotency-Key" in body


@pytest.mark.parametrize("role,status,form", [("owner", 200, True), ("billing", 200, True),
                                              ("member", 200, False), ("viewer", 404, False)])
def test_roles(member_factory, role, status, form):
    response = console_for(member_factory(role=role)).get(PAGE)
    assert response.status_code == status
    if status == 200:
        assert ('id="topup-form"' in response.content.decode()) is form


def test_status_partial_polls_until_credited_then_shows_the_new_balance(member_factory):
    membership = member_factory(role="owner")
    org = membership.organization
    topup = TopUp.objects.create(organization=org, amount=100_000_000, amount_fen=10000,
                                 stripe_payment_intent_id="pi_console")
    client = console_for(membership)
    url = f"/billing/topup/{topup.pk}/status/"
    pending = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert 'hx-trigger="every 2s"' in pending and 'data-state="created"' in pending and "¥0.00" in pending
    cash_credit(org=org, amount=100_000_000, key="stripe_pi:pi_console", code="topup", payment_ref="pi_console")
    TopUp.objects.filter(pk=topup.pk).update(state=TopUpState.SUCCEEDED)
    done = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "hx-trigger" not in done and 'data-state="succeeded"' in done and "¥100.00" in done


def test_other_organizations_status_is_404(member_factory):
    theirs = TopUp.objects.create(organization=member_factory().organization, amount=10_000_000, amount_fen=1000)
    assert console_for(member_factory(role="owner")).get(f"/billing/topup/{theirs.pk}/status/").status_code == 404


def test_page_query_count_does_not_grow_with_topups(member_factory):
    membership = member_factory(role="owner")
    client = console_for(membership)

    def count_for(n):
        TopUp.objects.filter(organization=membership.organization).delete()
        TopUp.objects.bulk_create([TopUp(organization=membership.organization, amount=10_000_000, amount_fen=1000)
                                   for _ in range(n)])
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(PAGE).status_code == 200
        return len(ctx.captured_queries)

    assert count_for(2) == count_for(10)


def test_on_the_embedded_development_keys_pay_is_disabled_and_the_page_says_why(member_factory, settings):
    # Once, under `make run` without a stand-in, the page said "unavailable" and Pay looked enabled.
    settings.STRIPE_API_KEY, settings.STRIPE_API_BASE, settings.STRIPE_STANDIN = "sk_test_cardmix_dev", "", False
    html = console_for(member_factory(role="owner")).get(PAGE).content.decode()
    error = re.search(r'<p id="topup-error"[^>]*>([^<]*)</p>', html)
    assert error and "hidden" not in error.group(0) and "Payments are not set up on this server" in error.group(1)
    assert "js.stripe.com" not in html  # nothing external to wait for
    assert re.search(r'<button type="submit" class="primary" data-method="card" disabled>', html)
    settings.STRIPE_API_BASE = "http://127.0.0.1:9"  # a stand-in: payments can work, the test-mode note shows
    settings.STRIPE_STANDIN = True
    html = console_for(member_factory(role="owner")).get(PAGE).content.decode()
    assert 'id="topup-test-mode"' in html and "No card is charged" in html
    assert re.search(r'<p id="topup-error"[^>]*hidden', html)


def test_a_failed_payment_reads_in_the_pages_language(member_factory):
    """Our own failure words are kept as their msgid and read in the page's language; a message the provider gave
    is shown as it came."""
    from django.db import transaction

    from billing.models_payments import StripeEvent
    from billing.payments.events import _on_intent_failed

    membership = member_factory(role="owner")
    client = console_for(membership)
    shown = []
    for pi, error in (("pi_fail_ours", {}), ("pi_fail_theirs", {"message": "Your card was declined."})):
        topup = TopUp.objects.create(organization=membership.organization, amount=10_000_000, amount_fen=1000,
                                     stripe_payment_intent_id=pi)
        row = StripeEvent.objects.create(id=f"evt_{pi}", type="payment_intent.payment_failed")
        with transaction.atomic():
            assert _on_intent_failed({"id": pi, "last_payment_error": error}, row) == "failed"
        shown.append(client.get(f"/billing/topup/{topup.pk}/status/", HTTP_HX_REQUEST="true",
                                HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode())
    assert "支付失败。" in shown[0] and "The payment failed." not in shown[0]
    assert "Your card was declined." in shown[1]
