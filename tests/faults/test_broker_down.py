"""Redis (broker and cache) down: a create is accepted and dispatched once Redis returns, never forgotten."""
import pytest

from .conftest import container_body, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.redis, pytest.mark.worker]


def test_create_while_broker_down_reaches_running_after_restart(faults):
    token = faults.shared_token()
    worker = faults.worker()
    beat = faults.beat()  # runs core.outbox_drain every second (OUTBOX_DRAIN_SECONDS=1)
    web = faults.shared_web()

    faults.redis.stop()  # SIGKILL of the real redis-server: broker, cache and throttle counters gone
    r = web.request("POST", "/api/v1/instances/", token, json=container_body("while-broker-down"))
    # Accepted (the dispatch waits in the transactional outbox), not a 500 and not forgotten.
    assert r.status_code == 201, r.text
    assert r.elapsed.total_seconds() < 10, r.elapsed  # the failed publish does not hang the request
    instance_id = r.json()["id"]
    assert r.json()["state"] == "provisioning"
    rows = faults.sql("SELECT sent_at, attempts, last_error FROM core_outboxmessage WHERE args = %s::jsonb",
                      (f'["{instance_id}"]',))
    assert len(rows) == 1 and rows[0][0] is None and rows[0][1] >= 1, rows  # the publish failed and was kept
    health = web.request("GET", "/healthz")
    assert health.status_code == 503 and health.json()["broker"] == "error", health.text
    faults.sql("SELECT pg_sleep(2)")
    assert faults.state(instance_id) == "provisioning"  # nobody could have told the worker

    faults.redis.start()  # the same port, empty: the message exists only in our outbox
    # Nobody calls anything: beat's drain publishes the row, the worker (reconnected) provisions.
    faults.wait_state(instance_id, "running", timeout=90)
    rows = faults.sql("SELECT sent_at FROM core_outboxmessage WHERE args = %s::jsonb", (f'["{instance_id}"]',))
    assert rows[0][0] is not None
    assert worker.alive() and beat.alive() and web.proc.alive()
    wait_until(lambda: web.request("GET", "/healthz").status_code == 200, 30, "healthz to recover")

    assert web.request("DELETE", f"/api/v1/instances/{instance_id}/", token).status_code == 202
    faults.wait_state(instance_id, "terminated")
    assert faults.leaked_cards() == []
    assert faults.meter_drift() == []
    faults.verify_ledger()
