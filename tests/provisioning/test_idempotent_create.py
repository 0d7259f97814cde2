"""An error after instance_create wrote the instance (building the response failed) rolls the instance back
with the answer: the client's retry with the same Idempotency-Key creates it once, never twice."""
from unittest import mock

import pytest
from django.db import OperationalError

from provisioning.api import views
from provisioning.models import Instance
from tests.factories.provisioning import container_body, make_fleet

pytestmark = pytest.mark.django_db


def test_an_error_after_the_instance_was_written_keeps_the_key_usable_and_creates_once(client):
    make_fleet(h100=1)
    client.raise_request_exception = False
    real = views._instance_response
    calls = {"n": 0}

    def flaky(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return real(*a, **kw)

    with mock.patch.object(views, "_instance_response", flaky):
        r1 = client.post("/api/v1/instances/", container_body("h100-sxm-80g", 1), format="json",
                         HTTP_IDEMPOTENCY_KEY="k1")
        r2 = client.post("/api/v1/instances/", container_body("h100-sxm-80g", 1), format="json",
                         HTTP_IDEMPOTENCY_KEY="k1")
    assert r1.status_code >= 500 and r2.status_code == 201
    assert Instance.objects.count() == 1  # before: the create had committed, the retry made a second one
