"""billing API routes."""
from django.urls import path

from .views import BalanceView, TransferListView, UsageListView

urlpatterns: list = [
    path("billing/balance/", BalanceView.as_view(), name="billing-balance"),
    path("billing/transfers/", TransferListView.as_view(), name="billing-transfers"),
    path("billing/usage/", UsageListView.as_view(), name="billing-usage"),
]

from billing.payments.api import urlpatterns as _payments_urlpatterns  # noqa: E402  (payments)

urlpatterns += _payments_urlpatterns  # (payments)

from billing.products.api import urlpatterns as _products_urlpatterns  # noqa: E402  (products)

urlpatterns += _products_urlpatterns  # (products)

from billing.fapiao.api import urlpatterns as _fapiao_urlpatterns  # noqa: E402  (fapiao)

urlpatterns += _fapiao_urlpatterns  # (fapiao)
