"""A test-only URLconf: the real API plus views that exercise the conventions."""
import threading

from django.db import connection
from django.urls import include, path
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import ServiceError
from core.idempotency import idempotent
from core.models import OutboxMessage

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


class Gate:
    """Holds a CreateRow call inside the view (its key claimed) until released; `pid` is its DB session."""

    def __init__(self, after_create: bool = False):
        self.entered, self.release, self.pid = threading.Event(), threading.Event(), None
        self.after_create = after_create  # hold the call once its row is written (not yet committed)

    def hold(self):
        with connection.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            self.pid = cur.fetchone()[0]
        self.entered.set()
        self.release.wait(10)


NEXT_GATES: list[Gate] = []  # the next CreateRow call waits at the first one


class CreateRow(APIView):
    """Creates one database row (an outbox message, task "test.row"); {"fail": "400"|"500"|"sql"} fails."""

    authentication_classes: list = []
    permission_classes: list = []

    @idempotent()
    def post(self, request):
        gate = NEXT_GATES.pop(0) if NEXT_GATES else None
        if gate is not None and not gate.after_create:
            gate.hold()
        fail = request.data.get("fail")
        if fail == "400":
            raise ServiceError("refused")
        if fail == "500":
            raise RuntimeError("kaboom")
        if fail == "sql":
            with connection.cursor() as cur:
                cur.execute("SELECT 1 / 0")
        row = OutboxMessage.objects.create(task="test.row", args=[request.data.get("name", "")])
        if gate is not None and gate.after_create:
            gate.hold()
        return Response({"id": row.pk}, status=201)


class Boom(APIView):
    authentication_classes: list = []
    permission_classes: list = []

    def get(self, request):
        raise RuntimeError("kaboom")


urlpatterns = [
    path("test/things/", CreateThing.as_view()),
    path("test/rows/", CreateRow.as_view()),
    path("test/boom/", Boom.as_view()),
    path("", include("config.urls")),
]
