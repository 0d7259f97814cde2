"""instance.running reaches a loopback receiver once, through a real Celery worker and the outbox."""
import time

import pytest
from standardwebhooks.webhooks import Webhook

from tests.factories.provisioning import container_body, make_fleet, wait_for_state
from tests.provisioning.conftest import _deterministic_simulator, client, owner  # noqa: F401

pytestmark = [pytest.mark.worker, pytest.mark.redis]
ENV = {"SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0", "WEBHOOK_ALLOWED_HOSTS": "127.0.0.1"}


def test_instance_running_is_delivered_once_and_verifies(start_worker, client, receiver, loopback_allowed):  # noqa: F811
    r = client.post("/api/v1/webhooks/", {"url": receiver.url, "event_types": ["instance.running",
                                                                              "instance.terminated"]}, format="json")
    assert r.status_code == 201, r.json()
    secret = r.json()["secret"]
    worker = start_worker(extra_env=ENV)
    make_fleet(h100=1)
    created = client.post("/api/v1/instances/", container_body("h100-sxm-80g", 1), format="json")
    assert created.status_code == 201, created.json()
    iid = created.json()["id"]
    wait_for_state(iid, "running", worker=worker)
    deadline = time.time() + 30
    while not receiver.requests and time.time() < deadline:
        time.sleep(0.1)
    worker.wait_ready()  # anything else it had queued is done too
    time.sleep(0.5)
    running = [q for q in receiver.requests if Webhook(secret).verify(q.body, q.headers)["type"] == "instance.running"]
    assert len(running) == 1, worker.log_tail()
    payload = Webhook(secret).verify(running[0].body, running[0].headers)
    assert payload["data"]["instance"]["id"] == iid and payload["data"]["instance"]["state"] == "running"
