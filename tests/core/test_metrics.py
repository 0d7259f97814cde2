"""/metrics is protected and exposes the aggregated multiprocess registry."""
import pytest

from core.metrics import TASK_FAILURES_TOTAL


@pytest.mark.django_db
def test_metrics_requires_staff_or_token(client, settings, member_factory):
    assert client.get("/metrics").status_code == 403
    settings.METRICS_TOKEN = "scrape-secret"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret")
    assert ok.status_code == 200
    membership = member_factory()
    membership.user.is_staff = True
    membership.user.save()
    client.force_login(membership.user)
    assert client.get("/metrics").status_code == 200


@pytest.mark.django_db
def test_task_failure_counter_moves(client, member_factory):
    from celery.signals import task_failure

    def value(body: str) -> float:
        for line in body.splitlines():
            if line.startswith('cardmix_task_failures_total{task="demo.fail"}'):
                return float(line.split()[-1])
        return 0.0

    membership = member_factory()
    membership.user.is_staff = True
    membership.user.save()
    client.force_login(membership.user)
    before = value(client.get("/metrics").content.decode())
    sender = type("T", (), {"name": "demo.fail"})()
    task_failure.send(sender=sender, task_id="t1", exception=RuntimeError("x"), args=(), kwargs={})
    after = value(client.get("/metrics").content.decode())
    assert after == before + 1
    assert TASK_FAILURES_TOTAL is not None
