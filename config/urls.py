"""Root URLconf: the API under /api/v1/, the admin, health, and the console at the root."""
from allauth.account import views as allauth_views
from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import RedirectView
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
    path("", include("privacy.api")),  # the organization export (account deletion is console-only)
    path("ping/", PingView.as_view(), name="ping"),  # observability: bench baseline
    path("<path:unknown>", core_views.api_not_found, name="not-found"),
]

# django-allauth under /accounts/: the steps of its sign-up, verification and password reset, its login steps,
# two-factor authentication (2fa/) and SSO (3rdparty/, oidc/). Its pages the console serves at its own URLs (login,
# sign-up, password reset) redirect there; allauth's email management is left out (an account has one address,
# changed by no one but an operator).
accounts = [
    path("login/", RedirectView.as_view(pattern_name="console:login", query_string=True), name="account_login"),
    path("signup/", RedirectView.as_view(pattern_name="console:signup", query_string=True), name="account_signup"),
    path("password/reset/", RedirectView.as_view(pattern_name="console:password_reset"),
         name="account_reset_password"),
    path("password/reset/done/", allauth_views.password_reset_done, name="account_reset_password_done"),
    re_path(r"^password/reset/key/(?P<uidb36>[0-9A-Za-z]+)-(?P<key>.+)/$", allauth_views.password_reset_from_key,
            name="account_reset_password_from_key"),
    path("password/reset/key/done/", allauth_views.password_reset_from_key_done,
         name="account_reset_password_from_key_done"),
    re_path(r"^confirm-email/(?P<key>[-:\w]+)/$", allauth_views.confirm_email, name="account_confirm_email"),
    path("confirm-email/", RedirectView.as_view(pattern_name="console:check_email"),
         name="account_email_verification_sent"),
    path("email/", RedirectView.as_view(pattern_name="console:dashboard"), name="account_email"),
    path("logout/", allauth_views.logout, name="account_logout"),
    path("inactive/", allauth_views.account_inactive, name="account_inactive"),
    path("reauthenticate/", allauth_views.reauthenticate, name="account_reauthenticate"),
    path("2fa/", include("allauth.mfa.urls")),
    path("3rdparty/", include("allauth.socialaccount.urls")),
    path("", include("allauth.socialaccount.providers.openid_connect.urls")),
]

urlpatterns = [
    path("healthz", core_views.healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("api/v1/", include((api_v1, "api"), namespace="api")),
    path("admin/", admin.site.urls),
    path("accounts/", include(accounts)),
    # i18n: static/js's strings in the request's language (locale/*/djangojs.po), loaded first by base.html.
    path("jsi18n/", JavaScriptCatalog.as_view(), name="javascript-catalog"),
    path("", include("console.urls")),
]

handler404 = "core.views.page_not_found"
handler500 = "core.views.server_error"
