"""Tenancy API routes (under /api/v1/)."""
from django.urls import path

from ..realname.api import urlpatterns as realname_urls
from . import views

urlpatterns = [
    path("organizations/current/", views.CurrentOrganizationView.as_view(), name="organization-current"),
    path("organizations/current/members/", views.MemberListView.as_view(), name="member-list"),
    path("organizations/current/members/<uuid:id>/", views.MemberDetailView.as_view(), name="member-detail"),
    path("organizations/current/sso-bindings/", views.SsoBindingListView.as_view(), name="sso-binding-list"),
    path("organizations/current/sso-bindings/<uuid:id>/", views.SsoBindingDetailView.as_view(),
         name="sso-binding-detail"),
    path("tokens/", views.TokenListView.as_view(), name="token-list"),
    path("tokens/<uuid:id>/", views.TokenDetailView.as_view(), name="token-detail"),
    path("ssh-keys/", views.SshKeyListView.as_view(), name="ssh-key-list"),
    path("ssh-keys/<uuid:id>/", views.SshKeyDetailView.as_view(), name="ssh-key-detail"),
    path("audit-events/", views.AuditEventListView.as_view(), name="audit-event-list"),
]
urlpatterns += realname_urls
