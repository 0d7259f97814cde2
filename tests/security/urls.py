"""The project's URLconf plus two views that fail, to check what a 500 shows (tests/security/test_secrets.py)."""
from django.urls import path
from rest_framework.permissions import AllowAny
from rest_framework.views import APIView

from config import urls as project


def _boom(request):
    from django.conf import settings

    stripe_key, webhook_secret = settings.STRIPE_API_KEY, settings.STRIPE_WEBHOOK_SECRET  # noqa: F841 (in locals)
    raise RuntimeError("forced failure")


class BoomApi(APIView):
    permission_classes = [AllowAny]

    def get(self, request):
        return _boom(request)


urlpatterns = [path("api/v1/boom/", BoomApi.as_view()), path("boom/", _boom)] + project.urlpatterns
handler404 = project.handler404
handler500 = project.handler500
