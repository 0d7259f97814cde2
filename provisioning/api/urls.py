"""provisioning API routes (SPEC §5)."""
from django.urls import path

from . import images, ports, views

urlpatterns = [
    path("instances/", views.InstanceListCreateView.as_view(), name="instance-list"),
    path("instances/<str:instance_id>/", views.InstanceDetailView.as_view(), name="instance-detail"),
    path("instances/<str:instance_id>/stop/", views.InstanceActionView.as_view(action="stop"),
         name="instance-stop"),
    path("instances/<str:instance_id>/start/", views.InstanceActionView.as_view(action="start"),
         name="instance-start"),
    path("instances/<str:instance_id>/move/", views.InstanceActionView.as_view(action="move"),
         name="instance-move"),
    path("instances/<str:instance_id>/package-renewal/", views.InstancePackageRenewalView.as_view(),
         name="instance-package-renewal"),
    path("instances/<str:instance_id>/events/", views.InstanceEventsView.as_view(), name="instance-events"),
    path("instances/<str:instance_id>/readiness/", views.InstanceReadinessView.as_view(),
         name="instance-readiness"),
    path("instances/<str:instance_id>/volumes/", views.InstanceVolumesView.as_view(), name="instance-volumes"),
    path("instances/<str:instance_id>/volumes/<str:volume_id>/", views.InstanceVolumeDetailView.as_view(),
         name="instance-volume-detail"),
    path("instances/<str:instance_id>/ports/", ports.InstancePortsView.as_view(), name="instance-ports"),
    path("instances/<str:instance_id>/ports/<int:port>/", ports.InstancePortView.as_view(), name="instance-port"),
    path("instances/<str:instance_id>/ports/<int:port>/shares/", ports.InstancePortSharesView.as_view(),
         name="instance-port-shares"),
    path("instances/<str:instance_id>/shares/<str:share_id>/", ports.InstancePortShareView.as_view(),
         name="instance-port-share"),
    path("instances/<str:instance_id>/save-image/", images.InstanceSaveImageView.as_view(),
         name="instance-save-image"),
    path("quotes/", views.QuoteView.as_view(), name="quote"),
]
