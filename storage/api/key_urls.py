"""S3 access keys of shared volumes (storage/access_keys.py)."""
from django.urls import path

from . import keys

urlpatterns = [
    path("volumes/<str:volume_id>/keys/", keys.VolumeKeyListView.as_view(), name="volume-key-list"),
    path("volumes/<str:volume_id>/keys/<str:key_id>/", keys.VolumeKeyDetailView.as_view(), name="volume-key-detail"),
]
