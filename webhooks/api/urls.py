from django.urls import path

from . import views

urlpatterns = [
    path("webhooks/", views.EndpointListView.as_view(), name="webhook-list"),
    path("webhooks/event-types/", views.EventTypeListView.as_view(), name="webhook-event-types"),
    path("webhooks/<str:id>/", views.EndpointDetailView.as_view(), name="webhook-detail"),
    path("webhooks/<str:id>/rotate-secret/", views.SecretRotateView.as_view(), name="webhook-rotate-secret"),
    path("webhooks/<str:id>/deliveries/", views.DeliveryListView.as_view(), name="webhook-deliveries"),
    path("webhooks/<str:id>/deliveries/<str:delivery_id>/resend/", views.DeliveryResendView.as_view(),
         name="webhook-delivery-resend"),
]
