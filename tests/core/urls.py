"""A test-only URLconf: the real API plus views that exercise the conventions."""
from django.urls import include, path
from rest_framework.response import Response
from rest_framework.views import APIView

from core.idempotency import idempotent

CALLS = {"create": 0}


class CreateThing(APIView):
    authentication_classes: list = []
    permission_classes: list = []

    @idempotent(redact=("secret",))
    def post(self, request):
        import time

        CALLS["create"] += 1
        time.sleep(float(request.data.get("sleep", 0)))
        return Response({"n": CALLS["create"], "secret": "s3cr3t", "echo": request.data}, status=201)


class Boom(APIView):
    authentication_classes: list = []
    permission_classes: list = []

    def get(self, request):
        raise RuntimeError("kaboom")


urlpatterns = [
    path("test/things/", CreateThing.as_view()),
    path("test/boom/", Boom.as_view()),
    path("", include("config.urls")),
]
