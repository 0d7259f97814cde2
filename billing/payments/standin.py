"""Test payments at localstripe, the local Stripe stand-in `make run` starts on embedded defaults.

localstripe's Stripe.js stand-in never sends what is typed into its card field: its confirmCardPayment only
answers the 3-D Secure prompt of an intent that already has a card. So with STRIPE_STANDIN each top-up's
PaymentIntent is created with localstripe's 3-D Secure test card and confirmed at once; the page's "Complete
authentication" then pays it, and localstripe's webhook credits cash as Stripe's would. No real card is involved,
and production refuses the setting (config/settings/production.py).
"""
from django.conf import settings

# localstripe's test card that asks for 3-D Secure (its _requires_authentication list).
STANDIN_CARD = {"number": "4000002500003155", "exp_month": 12, "exp_year": 2034, "cvc": "123"}


def standin_intent_kwargs(stripe) -> dict:
    """Extra PaymentIntent.create arguments in stand-in mode (a test card, confirmed); {} otherwise."""
    if not settings.STRIPE_STANDIN:
        return {}
    method = stripe.PaymentMethod.create(type="card", card=STANDIN_CARD)
    return {"payment_method": method.id, "confirm": True}
