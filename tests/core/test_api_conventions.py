"""SPEC §5 conventions: the error envelope for every error, pagination limits, Idempotency-Key."""
import threading

import pytest
from django.db import connection

from tests.core import urls as test_urls


def assert_error(response, status, code):
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    return body["error"]


@pytest.mark.django_db
def test_unknown_api_path_is_404_in_error_format(api_client):
    assert_error(api_client.get("/api/v1/no-such-thing/"), 404, "not_found")
    assert_error(api_client.post("/api/v1/deeply/nested/unknown", {}), 404, "not_found")


@pytest.mark.django_db
@pytest.mark.urls("tests.core.urls")
def test_wrong_method_is_405(api_client):
    assert_error(api_client.post("/test/boom/"), 405, "method_not_allowed")


@pytest.mark.django_db
@pytest.mark.urls("tests.core.urls")
def test_unhandled_exception_is_500_in_error_format(api_client):
    response = api_client.get("/test/boom/")
    err = assert_error(response, 500, "internal_error")
    assert "kaboom" not in err["message"]  # internals never leak


@pytest.mark.django_db
@pytest.mark.urls("tests.core.urls")
def test_idempotency_replays_same_body_and_refuses_different_body(api_client):
    test_urls.CALLS["create"] = 0
    first = api_client.post("/test/things/", {"a": 1, "b": [1, 2]}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert first.status_code == 201 and first.json()["secret"] == "s3cr3t"
    # Same body in another key order is the same canonical JSON.
    again = api_client.post("/test/things/", {"b": [1, 2], "a": 1}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert again.status_code == 201
    assert again.json()["n"] == first.json()["n"]
    assert again.json()["secret"] is None  # secrets are never stored
    assert again["Idempotent-Replayed"] == "true"
    assert test_urls.CALLS["create"] == 1
    assert_error(api_client.post("/test/things/", {"a": 2}, format="json", HTTP_IDEMPOTENCY_KEY="k1"),
                 422, "idempotency_key_reused")
    # Another key, or no key, creates anew.
    assert api_client.post("/test/things/", {"a": 1}, format="json", HTTP_IDEMPOTENCY_KEY="k2").json()["n"] == 2
    assert api_client.post("/test/things/", {"a": 1}, format="json").json()["n"] == 3


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.core.urls")
def test_concurrent_duplicates_create_once():
    from rest_framework.test import APIClient

    test_urls.CALLS["create"] = 0
    barrier = threading.Barrier(8)
    results = []

    def call():
        client = APIClient()
        barrier.wait()
        results.append(client.post("/test/things/", {"sleep": 0.5}, format="json", HTTP_IDEMPOTENCY_KEY="same"))
        connection.close()

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted(r.status_code for r in results)
    assert test_urls.CALLS["create"] == 1
    assert statuses.count(201) >= 1
    assert set(statuses) <= {201, 409}
    for r in results:
        if r.status_code == 409:
            assert r.json()["error"]["code"] == "idempotency_in_progress"


@pytest.mark.django_db
def test_schema_and_docs_served_offline(api_client):
    schema = api_client.get("/api/v1/schema/")
    assert schema.status_code == 200
    assert b"openapi" in schema.content
    docs = api_client.get("/api/v1/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "cdn" not in html.lower() and "/static/drf_spectacular_sidecar/" in html


@pytest.mark.django_db
def test_oversized_and_deeply_nested_bodies_are_400_not_500(member_factory, token_client_for, settings):
    client = token_client_for(member_factory(role="owner"))
    big = '{"name": "' + "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10) + '"}'
    err = assert_error(client.generic("POST", "/api/v1/ssh-keys/", big, content_type="application/json"),
                       400, "validation_error")
    assert "too large" in err["message"].lower()
    deep = "[" * 100_000 + "]" * 100_000
    assert_error(client.generic("POST", "/api/v1/ssh-keys/", deep, content_type="application/json"),
                 400, "validation_error")
