"""Production settings: refuse to start without a real SECRET_KEY; hardened HTTP."""
import os

from django.core.exceptions import ImproperlyConfigured

if not os.environ.get("SECRET_KEY"):
    raise ImproperlyConfigured(
        "CARDMIX_ENV=production needs SECRET_KEY in the environment (e.g. `python -c "
        "'import secrets; print(secrets.token_urlsafe(50))'`)."
    )

if not os.environ.get("DATABASE_URL"):  # the embedded server is the demo's, never a deployment's
    raise ImproperlyConfigured("CARDMIX_ENV=production needs DATABASE_URL (postgres://user:password@host:5432/name).")

from core.settings_registry import read  # noqa: E402

from .base import *  # noqa: E402,F401,F403

# --- HTTPS (ALLOWED_HOSTS defaults to localhost here: config/settings/django.py) ---------------------------------
DEBUG = False
SECURE_SSL_REDIRECT = read("SECURE_SSL_REDIRECT")  # declared in config/settings/django.py
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = read("SECURE_HSTS_SECONDS")
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

# --- Cookies and browser isolation (tests/security/test_web.py) ------------------------------------------------
# The console reads the CSRF token from the form / <body hx-headers>, never from the cookie.
CSRF_COOKIE_HTTPONLY = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"

if STRIPE_STANDIN:  # noqa: F405 - test payments at a local stand-in never take real money
    raise ImproperlyConfigured("STRIPE_STANDIN (localstripe test payments) is for `make run` only, not production.")
