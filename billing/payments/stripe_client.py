"""stripe-python configured from settings; the only module that touches stripe's globals.

Keys are never logged: errors are logged by type and Stripe's request id only.
"""
import stripe
from django.conf import settings


def stripe_api():
    """The configured `stripe` module (API key, and api_base when STRIPE_API_BASE points at localstripe)."""
    stripe.api_key = settings.STRIPE_API_KEY
    if settings.STRIPE_API_BASE:
        stripe.api_base = settings.STRIPE_API_BASE.rstrip("/")
    # Every call that creates something carries an idempotency key, so a network retry is safe.
    stripe.max_network_retries = 2
    return stripe


def as_dict(obj) -> dict:
    """A Stripe object (or an already-plain dict) as plain JSON data, nested objects included."""
    return _plain(obj)


def _plain(value):
    if isinstance(value, stripe.StripeObject):
        return _plain(value.to_dict())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def object_id(value) -> str:
    """The id of an expandable field: either the id string or the expanded object."""
    if isinstance(value, dict):
        return str(value.get("id") or "")
    return str(value or "")
