"""Each kind of event moves its metric, read through /metrics before and after (multiprocess aggregation).

Events that happen in the worker in production (readiness, the meter tick, task failures) happen here
in a real `celery worker` process; /metrics in the test process sees them through the shared
PROMETHEUS_MULTIPROC_DIR, exactly as a scrape of gunicorn sees its sibling processes.

That directory (var/test/prometheus) is shared by every test run on the machine, so a metric another
run can move at the same moment is asserted to have moved by at least one; labels only this test
produces (A800 readiness, a failing billing.meter_tick) are asserted exactly.
"""
import json
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.factories.provisioning import container_body, funded, make_fleet, wait_for_state

TOKEN = "observability-scrape-secret"
WORKER_ENV = {"SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0"}


@pytest.fixture
def scrape(client, settings):
    """scrape() → {(sample name, frozenset(labels)): value} from GET /metrics."""
    settings.METRICS_TOKEN = TOKEN

    def read() -> dict:
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        assert response.status_code == 200
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(response.content.decode())
                for s in family.samples}

    return read


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def wait_until_moved(scrape, name: str, before: float, timeout: float = 30, **labels) -> float:
    """Poll /metrics until the sample exceeds `before` (the worker writes its files asynchronously)."""
    deadline = time.time() + timeout
    now = before
    while time.time() < deadline:
        now = value(scrape(), name, **labels)
        if now > before:
            return now
        time.sleep(0.2)
    return now


@pytest.mark.worker
@pytest.mark.redis
def test_placement_readiness_tick_and_task_failure_move_their_metrics(start_worker, member_factory,
                                                                       session_client_for, scrape):
    from billing.tasks import meter_tick_task
    from provisioning.models import ReadinessReport
    from provisioning.services.fleet import fault_force

    worker = start_worker(extra_env=WORKER_ENV)
    node = make_fleet(a800=1)[0]  # an accelerator other tests rarely use: its readiness counters are ours
    owner = funded(member_factory(role="owner"))
    api = session_client_for(owner)
    # The first readiness run reads low bandwidth, the retry passes: one fail and one pass.
    fault_force(node=node, operation="readiness", faults=["low_bandwidth"], times=1)
    before = scrape()

    r = api.post("/api/v1/instances/", container_body("a800-sxm-80g", 2), format="json")
    assert r.status_code == 201, r.json()
    iid = r.json()["id"]
    wait_for_state(iid, "running", worker=worker)
    assert list(ReadinessReport.objects.filter(instance_id=iid).values_list("passed", flat=True)) == [False, True]

    acc = {"accelerator": "a800-sxm-80g"}
    after = scrape()
    # Placement ran in this process (the API call), readiness in the worker.
    assert value(after, "cardmix_placement_decision_seconds_count") >= \
        value(before, "cardmix_placement_decision_seconds_count") + 1
    assert value(after, "cardmix_placement_decision_seconds_sum") > value(before, "cardmix_placement_decision_seconds_sum")
    assert value(after, "cardmix_readiness_total", **acc, result="pass") == \
        value(before, "cardmix_readiness_total", **acc, result="pass") + 1
    assert value(after, "cardmix_readiness_total", **acc, result="fail") == \
        value(before, "cardmix_readiness_total", **acc, result="fail") + 1
    # The scrape-time gauge reads the database: this running instance is counted.
    assert value(after, "cardmix_instances", state="running") >= 1

    # The meter tick, run by the worker (as beat would).
    ticks = value(after, "cardmix_meter_tick_seconds_count")
    meter_tick_task.apply_async(queue=worker.queue)
    assert wait_until_moved(scrape, "cardmix_meter_tick_seconds_count", ticks) >= ticks + 1

    # A task failure in the worker: the task is called with arguments it does not take.
    from config.celery import app

    failures = value(scrape(), "cardmix_task_failures_total", task="billing.meter_tick")
    app.send_task("billing.meter_tick", args=["unexpected"], queue=worker.queue)
    assert wait_until_moved(scrape, "cardmix_task_failures_total", failures, task="billing.meter_tick") == failures + 1

    # The operator's view: the worker wrote one JSON line per provisioning step with the ids and durations.
    lines = _json_lines(worker.log_tail(200_000))
    steps = [line for line in lines if line.get("message") == "driver step" and line.get("instance_id") == iid]
    assert {s["step"] for s in steps} >= {"prepare", "topology", "readiness"}
    assert all(s["driver"] == "simulated" and isinstance(s["duration_s"], float) for s in steps)
    hops = [line for line in lines if line.get("message") == "provisioning step" and line.get("instance_id") == iid]
    assert [(h["from_state"], h["to_state"]) for h in hops] == [("provisioning", "checking"), ("checking", "running")]
    failed = [line for line in lines if line.get("message") == "task failed"]
    assert failed and failed[-1]["task"] == "billing.meter_tick" and "TypeError" in failed[-1]["error"]


def _json_lines(text: str) -> list[dict]:
    out = []
    for raw in text.splitlines():
        if raw.startswith("{"):
            try:
                out.append(json.loads(raw))
            except ValueError:
                pass
    return out


@pytest.mark.django_db(transaction=True)
def test_sla_breach_compensation_counts_each_breach_once(member_factory, scrape):
    """A running instance that became ready after its deadline: settled (compensated) once, counted once."""
    from datetime import timedelta

    from django.utils import timezone

    from billing.ledger import platform_accounts_ensure
    from provisioning.models import InstanceEvent
    from provisioning.services.sla import sla_settle
    from tests.factories.provisioning import InstanceFactory

    platform_accounts_ensure()
    org = member_factory().organization
    now = timezone.now()
    inst = InstanceFactory(organization=org, state="running", ready_at=now, sla_deadline=now - timedelta(seconds=1))
    opened = InstanceEvent.objects.create(instance=inst, from_state="", to_state="pending", reason="create",
                                          created_at=now - timedelta(minutes=16))
    inst.sla_event_id = opened.pk
    inst.save(update_fields=["sla_event_id"])
    before = value(scrape(), "cardmix_sla_breaches_total")
    assert sla_settle(instance_id=inst.pk) == 1_900_000  # 1 s late → one hour of the locked rate
    assert value(scrape(), "cardmix_sla_breaches_total") >= before + 1
    # A replay of the grant itself (same breach id) posts nothing new and is not counted again.
    from django.db import connection, transaction

    from billing.credits import compensation_grant
    from billing.models import Transfer
    from core.metrics import SLA_BREACHES_TOTAL

    with transaction.atomic():
        compensation_grant(org=org, breach_id=str(inst.sla_event_id), amount=1_900_000)
        pending = [entry[1] for entry in connection.run_on_commit]
    assert SLA_BREACHES_TOTAL.inc not in pending
    with transaction.atomic():  # while a new breach id is counted, once its grant commits
        compensation_grant(org=org, breach_id=f"obs-{inst.pk}", amount=1_000)
        assert SLA_BREACHES_TOTAL.inc in [entry[1] for entry in connection.run_on_commit]
    assert Transfer.objects.filter(key=f"sla:{inst.sla_event_id}").count() == 1


@pytest.mark.django_db
def test_webhook_bad_signature_counts_a_failure(client, scrape):
    before = value(scrape(), "cardmix_webhook_failures_total", reason="bad_signature")
    r = client.post("/api/v1/billing/stripe/webhook/", data=b'{"id": "evt_1"}', content_type="application/json",
                    HTTP_STRIPE_SIGNATURE="t=1,v1=deadbeef")
    assert r.status_code == 400
    assert value(scrape(), "cardmix_webhook_failures_total", reason="bad_signature") >= before + 1


@pytest.mark.django_db
def test_meter_tick_in_process_is_timed(scrape):
    from billing.tick import meter_tick

    before = value(scrape(), "cardmix_meter_tick_seconds_count")
    meter_tick()
    assert value(scrape(), "cardmix_meter_tick_seconds_count") >= before + 1


@pytest.mark.redis
@pytest.mark.django_db
def test_queue_length_gauge_reads_the_broker(settings, scrape):
    """The gauge is the broker list's length (Celery's Redis transport keeps a queue as one list)."""
    import uuid

    import redis

    queue = f"cardmix-obs-{uuid.uuid4().hex[:8]}"  # nobody consumes it
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    broker = redis.Redis.from_url(settings.REDIS_URL)
    try:
        assert value(scrape(), "cardmix_celery_queue_length", queue=queue) == 0
        broker.lpush(queue, b"{}", b"{}", b"{}")  # three waiting messages
        assert value(scrape(), "cardmix_celery_queue_length", queue=queue) == 3
    finally:
        broker.delete(queue)
