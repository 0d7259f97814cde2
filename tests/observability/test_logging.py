"""JSON log lines carry the request id and the organization id (API token or console session), and
nothing leaks from one request into the next; worker steps carry the instance id (test_metrics_events)."""
import io
import json
import logging

import pytest
from pythonjsonlogger.json import JsonFormatter

from core.logging import RequestIdFilter, instance_id_var, log_context, org_id_var

pytestmark = pytest.mark.django_db


@pytest.fixture
def captured():
    """Lines written by a handler configured like settings.LOGGING's console handler."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s"))
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        root.removeHandler(handler)


def test_token_request_logs_request_and_org_id(settings, member_factory, token_client_for, captured):
    settings.ROOT_URLCONF = "tests.observability.urls"
    owner = member_factory(role="owner")
    client = token_client_for(owner)
    response = client.get("/api/v1/logging-probe/", HTTP_X_REQUEST_ID="req-obs-1")
    assert response.status_code == 200 and response["X-Request-ID"] == "req-obs-1"
    line = next(x for x in captured() if x["message"] == "inside the view")
    assert line["request_id"] == "req-obs-1"
    assert line["org_id"] == str(owner.organization_id)
    # The request is over: nothing leaks into whatever this thread logs next.
    assert org_id_var.get() == "" and instance_id_var.get() == ""


def test_session_request_logs_org_id(settings, member_factory, session_client_for, captured):
    settings.ROOT_URLCONF = "tests.observability.urls"
    member = member_factory(role="viewer")
    assert session_client_for(member).get("/api/v1/logging-probe/").status_code == 200
    line = next(x for x in captured() if x["message"] == "inside the view")
    assert line["org_id"] == str(member.organization_id) and line["request_id"]


def test_error_responses_logged_after_the_middleware_keep_the_ids(member_factory, token_client_for, captured):
    owner = member_factory(role="owner")
    client = token_client_for(owner)
    r = client.post("/api/v1/quotes/", {"kind": "vm"}, format="json", HTTP_X_REQUEST_ID="req-obs-400")
    assert r.status_code == 400
    line = next(x for x in captured() if x["name"] == "django.request" and x["levelname"] == "WARNING")
    assert line["request_id"] == "req-obs-400" and line["org_id"] == str(owner.organization_id)


def test_log_context_sets_and_restores_instance_id(captured):
    log = logging.getLogger("cardmix.test.observability")
    with log_context(instance_id="i-1", org_id="o-1"):
        log.warning("in a step")
    log.warning("after")
    first, second = captured()[-2:]
    assert (first["instance_id"], first["org_id"]) == ("i-1", "o-1")
    assert (second["instance_id"], second["org_id"]) == ("", "")
