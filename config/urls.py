"""Root URLconf: the API under /api/v1/, the admin, health, and the console at the root."""
from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from core import views as core_views
from core.metrics_view import metrics
from core.ping import PingView  # observability: bench baseline

api_v1 = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("", include("tenancy.api.urls")),
    path("", include("inventory.api.urls")),
    path("", include("hardware.api.urls")),
    path("", include("billing.api.urls")),
    path("", include("storage.api.urls")),
    path("", include("storage.api.key_urls")),  # S3 access keys of shared volumes
    path("", include("provisioning.api.urls")),
    path("", include("webhooks.api.urls")),
    path("ping/", PingView.as_view(), name="ping"),  # observability: bench baseline
    path("<path:unknown>", core_views.api_not_found, name="not-found"),
]

urlpatterns = [
    path("healthz", core_views.healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("api/v1/", include((api_v1, "api"), namespace="api")),
    path("admin/", admin.site.urls),
    # django-allauth (MFA, SSO) under /accounts/; what the console already does at its own URLs goes there.
    path("accounts/login/", RedirectView.as_view(pattern_name="console:login", query_string=True)),
    path("accounts/signup/", RedirectView.as_view(pattern_name="console:signup", query_string=True)),
    path("accounts/password/reset/", RedirectView.as_view(pattern_name="console:password_reset")),
    path("accounts/email/", RedirectView.as_view(pattern_name="console:dashboard")),  # one address per account
    path("accounts/", include("allauth.urls")),
    path("", include("console.urls")),
]

handler404 = "core.views.page_not_found"
handler500 = "core.views.server_error"
