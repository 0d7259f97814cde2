"""Console routes. Each area has its own views module under console/views/."""
from django.contrib.auth import views as auth_views
from django.urls import path, re_path
from django.views.generic import RedirectView

from .views import account, language, pages, privacy, proxy, security, verification, webhooks

app_name = "console"

urlpatterns = [
    path("", pages.landing, name="landing"),
    # An instance's HTTP port through the platform's proxy (its WebSocket upgrades: console/routing.py).
    re_path(r"^proxy/(?P<instance_id>[^/]+)/(?P<port>[0-9]{1,5})/(?P<rest>.*)$", proxy.proxy, name="proxy"),
    path("login/", account.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("language/", language.set_language, name="set_language"),  # i18n: the header's switch
    path("dashboard/", pages.dashboard, name="dashboard"),
    # --- tenancy: account pages ---
    # Sign-up and password reset are allauth's views; its other steps live under /accounts/ (config/urls.py).
    path("signup/", account.SignupView.as_view(), name="signup"),
    path("signup/check-email/", account.check_email, name="check_email"),
    path("password-reset/", account.PasswordResetView.as_view(), name="password_reset"),
    # Links and pages of before allauth: a verification link still verifies, a reset link still resets.
    path("verify-email/<str:token>/", account.verify_email_legacy, name="verify_email"),
    path("password-reset/sent/", RedirectView.as_view(pattern_name="account_reset_password_done"),
         name="password_reset_done"),
    path("password-reset/complete/", RedirectView.as_view(pattern_name="account_reset_password_from_key_done"),
         name="password_reset_complete"),
    path("password-reset/<uidb64>/<token>/", account.password_reset_legacy, name="password_reset_confirm"),
    path("account/organizations/", account.organizations, name="organizations"),
    path("account/verification/", verification.verification_page, name="verification"),
    path("account/export/", privacy.organization_export, name="organization_export"),
    path("account/delete/", privacy.account_delete_page, name="account_delete"),
    path("account/delete/<str:token>/", privacy.account_delete_confirm, name="account_delete_confirm"),
    path("account/organizations/switch/", account.organization_switch, name="organization_switch"),
    path("account/members/", account.members, name="members"),
    path("account/members/<uuid:id>/", account.member_update, name="member_update"),
    path("account/members/<uuid:id>/remove/", account.member_remove, name="member_remove"),
    path("account/tokens/", account.tokens, name="tokens"),
    path("account/tokens/<uuid:id>/revoke/", account.token_revoke, name="token_revoke"),
    # --- webhooks to the organization's own endpoints ---
    path("webhooks/", webhooks.webhooks, name="webhooks"),
    path("webhooks/<uuid:id>/", webhooks.webhook_detail, name="webhook_detail"),
    path("webhooks/<uuid:id>/toggle/", webhooks.webhook_toggle, name="webhook_toggle"),
    path("webhooks/<uuid:id>/rotate/", webhooks.webhook_rotate, name="webhook_rotate"),
    path("webhooks/<uuid:id>/delete/", webhooks.webhook_delete, name="webhook_delete"),
    path("webhooks/<uuid:id>/deliveries/<uuid:delivery_id>/resend/", webhooks.webhook_resend,
         name="webhook_resend"),
    path("account/security/", security.security, name="security"),
    path("account/security/sso-bindings/<uuid:id>/remove/", security.sso_binding_delete, name="sso_binding_delete"),
    path("account/ssh-keys/", account.ssh_keys, name="ssh_keys"),
    path("account/ssh-keys/<uuid:id>/delete/", account.ssh_key_delete, name="ssh_key_delete"),
]

# --- billing: top-up (payments) ---
from .views import billing_topup  # noqa: E402

urlpatterns += [
    path("billing/topup/", billing_topup.billing_topup, name="billing_topup"),
    path("billing/topup/<uuid:id>/status/", billing_topup.billing_topup_status, name="billing_topup_status"),
]

# --- billing products: statements, sponsorship, invoices ---
from .views import billing_products  # noqa: E402

urlpatterns += [
    path("billing/statements/", billing_products.statements, name="billing_statements"),
    path("billing/statements/<str:month>/", billing_products.statement_detail, name="billing_statement"),
    path("billing/statements/<str:month>/csv/", billing_products.statement_csv_download, name="billing_statement_csv"),
    path("billing/sponsorships/", billing_products.sponsorships, name="billing_sponsorships"),
    path("billing/invoices/", billing_products.invoices, name="billing_invoices"),
]

# --- billing: fapiao requests ---
from .views import billing_fapiao  # noqa: E402

urlpatterns += [
    path("billing/fapiao/", billing_fapiao.fapiao_page, name="billing_fapiao"),
    path("billing/fapiao/<uuid:id>/cancel/", billing_fapiao.fapiao_cancel_view, name="billing_fapiao_cancel"),
    path("billing/fapiao/<uuid:id>/pdf/", billing_fapiao.fapiao_pdf, name="billing_fapiao_pdf"),
]

# --- console: dashboard, instances, billing overview ---
from .views import billing as billing_views  # noqa: E402
from .views import instance_access, instance_retry, instances  # noqa: E402

urlpatterns += [
    path("instances/", instances.instance_list, name="instance_list"),
    path("instances/new/", instances.instance_new, name="instance_new"),
    path("instances/quote/", instances.instance_quote, name="instance_quote"),
    path("instances/<str:instance_id>/", instances.instance_detail, name="instance_detail"),
    path("instances/<str:instance_id>/package-renewal/", instances.instance_package_renewal,
         name="instance_package_renewal"),
    path("instances/<str:instance_id>/retry/", instance_retry.instance_retry_view, name="instance_retry"),
    # The Access section: ports, share links (before the action pattern, which would take "ports").
    path("instances/<str:instance_id>/ports/", instance_access.instance_port_add_view, name="instance_port_add"),
    path("instances/<str:instance_id>/ports/<int:port>/open/", instance_access.instance_port_open_view,
         name="instance_port_open"),
    path("instances/<str:instance_id>/ports/<int:port>/remove/", instance_access.instance_port_remove_view,
         name="instance_port_remove"),
    path("instances/<str:instance_id>/ports/<int:port>/share/", instance_access.instance_port_share_view,
         name="instance_port_share"),
    path("instances/<str:instance_id>/shares/<str:share_id>/revoke/", instance_access.instance_share_revoke_view,
         name="instance_share_revoke"),
    path("instances/<str:instance_id>/<str:action>/", instances.instance_action, name="instance_action"),
    path("billing/", billing_views.billing, name="billing"),
    path("billing/ledger/<str:instance_id>/<str:day>/", billing_views.ledger_day, name="billing_ledger_day"),
]

# --- teams: invitations by email, organizations created from the console ---
from .views import teams  # noqa: E402

urlpatterns += [
    path("account/members/invite/", teams.member_invite, name="member_invite"),
    path("invite/<str:token>/", teams.invitation_accept, name="invitation_accept"),
    path("account/organizations/new/", teams.organization_new, name="organization_new"),
]

# --- storage: volumes and the dataset library ---
from .views import storage as storage_views  # noqa: E402

urlpatterns += [
    path("storage/", storage_views.storage, name="storage"),
    path("storage/volumes/<str:volume_id>/grow/", storage_views.volume_grow, name="volume_grow"),
    path("storage/volumes/<str:volume_id>/delete/", storage_views.volume_delete, name="volume_delete"),
]

# --- custom images: the organization's private images, Save as image ---
from .views import images as image_views  # noqa: E402

urlpatterns += [
    path("images/", image_views.images, name="images"),
    path("images/<str:image_id>/delete/", image_views.custom_image_delete, name="custom_image_delete"),
    path("images/save/<str:instance_id>/", image_views.instance_save_image, name="instance_save_image"),
]
