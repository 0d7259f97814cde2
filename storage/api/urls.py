"""storage API routes: /api/v1/volumes/, /api/v1/datasets/, /api/v1/storage-prices/."""
from django.urls import path

from . import views

urlpatterns = [
    path("volumes/", views.VolumeListCreateView.as_view(), name="volume-list"),
    path("volumes/<str:volume_id>/", views.VolumeDetailView.as_view(), name="volume-detail"),
    path("datasets/", views.DatasetListView.as_view(), name="dataset-list"),
    path("datasets/<slug:slug>/", views.DatasetDetailView.as_view(), name="dataset-detail"),
    path("storage-prices/", views.StoragePriceListView.as_view(), name="storage-price-list"),
]
