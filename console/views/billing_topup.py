"""Console top-up page: Stripe.js confirms the PaymentIntent in the browser (card data never reaches us);
the new balance appears once Stripe's webhook lands (htmx polls a small partial)."""
from decimal import Decimal

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext

from billing.models_payments import UCNY_PER_FEN
from billing.models_products import InvoiceState
from billing.payments.selectors import cash_balance, topup_get, topup_list
from billing.payments.services import payment_method_types, payments_unavailable
from billing.products.postpaid import invoice_due_in_fen, invoice_pay_amount
from billing.products.selectors import invoice_get
from core.errors import NotFoundError
from tenancy.permissions import role_can

SETTLED = ("succeeded", "refunded")


def _membership_or_404(request, capability: str):
    membership = getattr(request, "membership", None)
    if membership is None or not role_can(membership.role, capability):
        raise Http404(gettext("No billing access in this organization."))
    return membership


def _invoice_to_pay(request, invoice_id) -> dict | None:
    """?invoice=<id>: the page pays that open invoice (its amount fixed) through the invoice's pay endpoint."""
    try:
        invoice = invoice_get(org=request.org, id=invoice_id)
    except NotFoundError as exc:
        raise Http404(str(exc)) from exc
    if invoice.state != InvoiceState.OPEN:
        messages.info(request, gettext("That invoice is included in a later month's invoice; pay that one.")
                      if invoice.state == InvoiceState.SUPERSEDED else gettext("That invoice is already paid."))
        return None
    amount = invoice_pay_amount(invoice)
    return {"invoice": invoice, "invoice_amount": amount, "invoice_surplus": amount - invoice_due_in_fen(invoice),
            "invoice_amount_text": f"{Decimal(amount // UCNY_PER_FEN) / 100:.2f}",
            "api_url": reverse("api:invoice-pay", args=[invoice.pk])}


@login_required
def billing_topup(request):
    """The top-up page: amount, card Element (and Alipay / WeChat Pay when enabled), recent top-ups.
    With ?invoice=<id> it pays that invoice instead (amount fixed, same card flow)."""
    membership = _membership_or_404(request, "read_billing")
    paying = None
    if request.GET.get("invoice"):
        paying = _invoice_to_pay(request, request.GET["invoice"])
        if paying is None:
            return redirect("console:billing_invoices")
    methods = payment_method_types()
    return render(request, "console/billing/topup.html", {
        **(paying or {"api_url": reverse("api:topup-list")}),
        "can_top_up": role_can(membership.role, "billing"),
        "cash": cash_balance(org=request.org),
        "topups": topup_list(org=request.org)[:10],
        "stripe_js_url": settings.STRIPE_JS_URL,
        "payments_down": payments_unavailable(),
        "standin": settings.STRIPE_STANDIN,
        "stripe_publishable_key": settings.STRIPE_PUBLISHABLE_KEY,
        "alipay": "alipay" in methods,
        "wechat_pay": "wechat_pay" in methods,
        "min_amount": settings.TOPUP_MIN_UCNY,
        "max_amount": settings.TOPUP_MAX_UCNY,
    })


@login_required
def billing_topup_status(request, id):
    """htmx partial: the top-up's state and the cash balance; keeps polling until the top-up settles."""
    _membership_or_404(request, "read_billing")
    try:
        topup = topup_get(org=request.org, id=id)
    except NotFoundError as exc:
        raise Http404(str(exc)) from exc
    return render(request, "console/billing/_topup_status.html", {
        "topup": topup, "cash": cash_balance(org=request.org), "settled": topup.state in SETTLED,
    })
