"""Root URLconf: the API under /api/v1/, the admin, health, and the console at the root."""
from django.contrib import admin
from django.urls import include, path
from django.views.i18n import JavaScriptCatalog
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
    # i18n: static/js's strings in the request's language (locale/*/djangojs.po), loaded first by base.html.
    path("jsi18n/", JavaScriptCatalog.as_view(), name="javascript-catalog"),
    path("", include("console.urls")),
]

handler404 = "core.views.page_not_found"
handler500 = "core.views.server_error"
