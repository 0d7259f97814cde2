"""inventory API routes: the catalog (/accelerators/, /images/, /zones/), the organization's private images
(/custom-images/) and the staff admin API (/admin-api/…)."""
from django.urls import path
from rest_framework.routers import SimpleRouter

from . import custom_images, views

router = SimpleRouter()
router.register("accelerators", views.AcceleratorViewSet, basename="accelerator")
router.register("images", views.ImageViewSet, basename="image")
router.register("zones", views.ZoneViewSet, basename="zone")
router.register("admin-api/nodes", views.NodeAdminViewSet, basename="admin-node")
router.register("admin-api/cards", views.CardAdminViewSet, basename="admin-card")
router.register("admin-api/prices", views.PriceAdminViewSet, basename="admin-price")
router.register("admin-api/images", views.ImageAdminViewSet, basename="admin-image")

urlpatterns = [
    *router.urls,
    path("custom-images/", custom_images.CustomImageListView.as_view(), name="custom-image-list"),
    path("custom-images/<str:image_id>/", custom_images.CustomImageDetailView.as_view(), name="custom-image-detail"),
]
