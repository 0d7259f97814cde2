"""Django itself: the environment, apps, middleware, templates, sign-in, languages, static files, email."""
from pathlib import Path

import environ

from core.settings_registry import declare, section, setting

section("Django and the web", "The process's environment, the hosts it answers for, time zones, static files and "
        "email.")

BASE_DIR = Path(__file__).resolve().parent.parent.parent
# Read before .env, as config/__init__.py reads it (prometheus's folder lives under it).
VAR_DIR = Path(setting("CARDMIX_VAR_DIR", "str", str(BASE_DIR / "var"),
                       "the folder of everything the processes write: the embedded PostgreSQL, the filesystem broker, "
                       "static files, the SSH gateway's host key, prometheus's files; read before `.env`",
                       doc_default="`var/` in the checkout"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

# A .env file in the checkout fills in what the environment does not say.
environ.Env.read_env(BASE_DIR / ".env", overwrite=False) if (BASE_DIR / ".env").exists() else None

CARDMIX_ENV = setting("CARDMIX_ENV", "str", "development",
                      "`production` imports config/settings/production.py: hardened HTTP, and it requires "
                      "`SECRET_KEY` and `DATABASE_URL`", choices=("development", "production"))
DEBUG = setting("DEBUG", "bool", CARDMIX_ENV == "development", "Django's debug mode (always off in production)",
                doc_default="on in development, off in production")
SECRET_KEY = setting("SECRET_KEY", "str", "dev-insecure-cardmix-secret-key-change-me-0123456789abcdef",
                     "Django's signing key; outside production the Fernet keys (`*_KEY`) are derived from it; required "
                     "in production", doc_default="a development-only value")
ALLOWED_HOSTS = setting("ALLOWED_HOSTS", "list", ["localhost"] if CARDMIX_ENV == "production" else ["*"],
                        "the host names the web answers for, comma-separated",
                        doc_default="`*` (production: `localhost`)")
CSRF_TRUSTED_ORIGINS = setting("CSRF_TRUSTED_ORIGINS", "list", [],
                               "origins (`https://console.example.com`) trusted for unsafe requests, comma-separated")
# Production only: production.py reads these two; development keeps Django's defaults (no redirect, no HSTS).
declare("SECURE_SSL_REDIRECT", "bool", True, "production: redirect plain-http requests to https")
declare("SECURE_HSTS_SECONDS", "int", 31536000, "production: the Strict-Transport-Security max-age (one year)")
# The web's young-generation GC threshold (core/gc_tuning.py; CPython's default is 700).
GC_GEN0_THRESHOLD = setting("GC_GEN0_THRESHOLD", "int", 50_000,
                            "the web processes' young-generation garbage-collector threshold (CPython's default is "
                            "700); what start-up built is frozen (`core/gc_tuning.py`)")
CARDMIX_ADDR = setting("CARDMIX_ADDR", "str", "127.0.0.1:8000",
                       "where `make run` (`manage.py runall`) serves, `host:port`; set `SITE_URL` to match")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "django_celery_beat",
    "axes",
    # Accounts: login with MFA (TOTP, WebAuthn passkeys, recovery codes) and OpenID Connect SSO (accounts.py).
    "allauth",
    "allauth.account",
    "allauth.mfa",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    # Cardmix apps, in dependency order (a lower app never imports a higher one).
    "core",
    "tenancy",
    "inventory",
    "hardware",
    "billing",
    "storage",
    "provisioning",
    "webhooks",
    "privacy",
    "console",
]

MIDDLEWARE = [
    "console.port_hosts.PortHostMiddleware",  # subdomain mode: a port's host reaches the proxy only
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "core.middleware.RequestIdMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",  # i18n: language cookie, then Accept-Language
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "tenancy.middleware.UserLanguageMiddleware",  # i18n: a logged-in user's own language comes first
    "tenancy.middleware.CurrentOrganizationMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "tenancy.middleware.MfaRequiredMiddleware",  # an organization that requires MFA: enrol first
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "core.security.ContentSecurityPolicyMiddleware",  # security: CSP on console pages
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",
    "core.middleware.AdminTimeZoneMiddleware",  # the admin's times in BILLING_TIME_ZONE, with their offset
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "tenancy.context_processors.current_organization",
                "console.context_processors.volume_deletions",
            ],
        },
    }
]

# --- Users and sign-in ----------------------------------------------------------------------------------------------
AUTH_USER_MODEL = "tenancy.User"
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "console:login"
LOGIN_REDIRECT_URL = "console:dashboard"
LOGOUT_REDIRECT_URL = "console:landing"

# --- Languages and time: English and Simplified Chinese (locale/, `make messages`) ----------------------------------
# The language is the user's own setting (tenancy.User.language), else the language cookie the header's switch sets,
# else Accept-Language, else English.
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]  # each named in its own language, as the switch shows them
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
BILLING_TIME_ZONE = setting("BILLING_TIME_ZONE", "str", "Asia/Shanghai",
                            "month boundaries of statements; the console shows every time in it, zone named "
                            "(`2026-01-02 11:04 UTC+8`); the admin too (`2026-01-02 11:04:05 UTC+0800`, typed times "
                            "read in it); the API stays UTC")
FORMAT_MODULE_PATH = ["config.formats"]  # datetimes without an explicit format carry their offset
ADMIN_URL_PREFIX = "/admin/"  # config/urls.py mounts the admin here (its times follow BILLING_TIME_ZONE)

# --- Static files (WhiteNoise) --------------------------------------------------------------------------------------
STATIC_URL = "/static/"
STATIC_ROOT = Path(setting("STATIC_ROOT", "str", str(VAR_DIR / "staticfiles"),
                           "where `collectstatic` gathers the static files WhiteNoise serves",
                           doc_default="`CARDMIX_VAR_DIR/staticfiles`"))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# --- Email and the public address -----------------------------------------------------------------------------------
EMAIL_BACKEND = setting("EMAIL_BACKEND", "str", "django.core.mail.backends.console.EmailBackend",
                        "Django's email backend for verification and warning emails", doc_default="console backend")
EMAIL_FILE_PATH = setting("EMAIL_FILE_PATH", "str", "",
                          "the folder of Django's file-based email backend") or None
DEFAULT_FROM_EMAIL = setting("DEFAULT_FROM_EMAIL", "str", "Cardmix <noreply@cardmix.local>",
                             "the sender of every email")
SITE_URL = setting("SITE_URL", "url", "http://127.0.0.1:8000",
                   "the console's public address, used in emailed links (verification, password reset, warnings), "
                   "the port proxy's scheme and the SSH gateway's default host")
