"""The REST API (SPEC §5): DRF, the OpenAPI schema, throttles, Idempotency-Key, client addresses, metrics."""
from datetime import timedelta

from core.settings_registry import section, setting

section("API", "The REST API's conventions (SPEC §5), its throttles and the addresses it trusts. See the "
        "[security model](/security.md) for the abuse controls.")

# Trusted reverse proxies in front of the app (each appends to X-Forwarded-For); 0 = none, the header is
# ignored. One setting for DRF throttles, django-axes and the audit log (core/clientip.py).
NUM_PROXIES = setting("NUM_PROXIES", "int", 0,
                      "trusted reverse proxies in front of the app, each appending to X-Forwarded-For (0: the header "
                      "is ignored); the client address of throttles, lockouts and the audit log (`core/clientip.py`)")
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
        "token": setting("THROTTLE_TOKEN", "str", "6000/min", "rate limit of each API token's calls (sessions are "
                         "not throttled by it): `number/period`, the period `second`, `min`, `hour` or `day`"),
        "anon": setting("THROTTLE_ANON", "str", "600/min", "rate limit of anonymous API calls, per client address"),
        "signup": setting("THROTTLE_SIGNUP", "str", "20/hour", "sign-ups per client address (it also limits "
                          "verification emails)"),
        "login": setting("THROTTLE_LOGIN", "str", "60/hour", "sign-in attempts per client address"),
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
    # Every operation documents the SPEC §5 error envelope (schemathesis checks answers against it).
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "core.schema.error_responses_hook"],
}
IDEMPOTENCY_TTL = timedelta(hours=setting("IDEMPOTENCY_TTL_HOURS", "int", 24,
                                          "how long an Idempotency-Key's answer is kept and replayed"))
METRICS_TOKEN = setting("METRICS_TOKEN", "str", "",
                        "bearer token for Prometheus scrapes of `/metrics` (staff sessions work too)")
