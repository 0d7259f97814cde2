"""Webhooks to customers (SPEC §11): Standard Webhooks signatures, retries for about 3 days."""
from core.settings_registry import section, setting

from .django import CARDMIX_ENV

section("Webhooks", "Customers' webhook endpoints (SPEC §11): signed with Standard Webhooks signatures, retried for "
        "about 3 days.")

# Hosts that skip the no-internal-address check (an explicit operator allow-list; tests name their loopback).
WEBHOOK_ALLOWED_HOSTS = setting("WEBHOOK_ALLOWED_HOSTS", "list", [],
                                "hosts that skip the no-internal-address check, comma-separated (an explicit "
                                "operator allow-list)")
WEBHOOK_REQUIRE_HTTPS = setting("WEBHOOK_REQUIRE_HTTPS", "bool", CARDMIX_ENV == "production",
                                "endpoints must be https", doc_default="on in production")
WEBHOOK_TIMEOUT_SECONDS = setting("WEBHOOK_TIMEOUT_SECONDS", "float", 5.0, "each delivery attempt's time limit")
WEBHOOK_RESPONSE_MAX_BYTES = setting("WEBHOOK_RESPONSE_MAX_BYTES", "int", 2048,
                                     "how much of an endpoint's answer a delivery keeps")
# 5 s, 1 min, 5 min, 30 min, 2 h, 6 h, 12 h, 24 h, 27 h: 2.98 days in all.
WEBHOOK_RETRY_SCHEDULE = setting("WEBHOOK_RETRY_SCHEDULE", "int_list",
                                 [5, 60, 300, 1800, 7200, 21600, 43200, 86400, 97200],
                                 "seconds to wait after attempt 1, 2, …; after the last the delivery fails and the "
                                 "endpoint is disabled (2.98 days in all)")
WEBHOOK_SECRET_OVERLAP_HOURS = setting("WEBHOOK_SECRET_OVERLAP_HOURS", "float", 24.0,
                                       "after a secret is rotated, deliveries are signed with the old one too for "
                                       "this long")
# Fernet key (urlsafe base64, 32 bytes) for signing secrets at rest; required in production.
WEBHOOK_SECRETS_KEY = setting("WEBHOOK_SECRETS_KEY", "str", "",
                              "Fernet key sealing endpoints' signing secrets at rest; required in production",
                              doc_default="derived from `SECRET_KEY` outside production")
