"""inventory API routes: the catalog (/accelerators/, /images/, /zones/) and the staff admin API (/admin-api/…)."""
from rest_framework.routers import SimpleRouter

from . import views

router = SimpleRouter()
router.register("accelerators", views.AcceleratorViewSet, basename="accelerator")
router.register("images", views.ImageViewSet, basename="image")
router.register("zones", views.ZoneViewSet, basename="zone")
router.register("admin-api/nodes", views.NodeAdminViewSet, basename="admin-node")
router.register("admin-api/cards", views.CardAdminViewSet, basename="admin-card")
router.register("admin-api/prices", views.PriceAdminViewSet, basename="admin-price")
router.register("admin-api/images", views.ImageAdminViewSet, basename="admin-image")

urlpatterns = router.urls
