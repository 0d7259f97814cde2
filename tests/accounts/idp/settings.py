"""The loopback identity provider's settings (not Cardmix's): django-oauth-toolkit with OpenID Connect."""
import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
SECRET_KEY = "idp-test-only-secret-key-0123456789abcdef0123456789"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "tests.accounts.idp.urls"
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions",
                  "django.contrib.messages", "oauth2_provider"]
MIDDLEWARE = ["django.contrib.sessions.middleware.SessionMiddleware", "django.middleware.csrf.CsrfViewMiddleware",
              "django.contrib.auth.middleware.AuthenticationMiddleware",
              "django.contrib.messages.middleware.MessageMiddleware"]
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [HERE / "templates"],
              "APP_DIRS": True, "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                                                   "django.contrib.auth.context_processors.auth"]}}]
# Its own database on the test run's PostgreSQL server (tests/accounts/conftest.py makes and drops it).
DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", **json.loads(os.environ["IDP_DB"])}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "/login/"
USE_TZ = True
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": os.environ["IDP_RSA_KEY"],
    "OAUTH2_VALIDATOR_CLASS": "tests.accounts.idp.validator.Validator",
    "SCOPES": {"openid": "OpenID Connect", "profile": "Profile", "email": "Email"},
    "PKCE_REQUIRED": True,
}
