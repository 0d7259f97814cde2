"""Test URLconf: a token-authenticated DRF view that logs from inside the request."""
import logging

from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

logger = logging.getLogger("cardmix.test.observability")


class LoggingView(APIView):
    def get(self, request):
        logger.warning("inside the view")
        return Response({"ok": True})


urlpatterns = [path("api/v1/logging-probe/", LoggingView.as_view())]
