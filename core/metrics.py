"""Prometheus metrics (multiprocess mode, so Celery workers' and gunicorn workers' samples count).

Counters and histograms live here so every app records into the same names; gauges that
describe the database (instances by state, queue length) are computed at scrape time.
"""
from prometheus_client import Counter, Histogram

PLACEMENT_SECONDS = Histogram(
    "cardmix_placement_decision_seconds", "Time to compute one placement decision",
    buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1),
)
READINESS_TOTAL = Counter("cardmix_readiness_total", "Readiness tests by accelerator and result",
                          ["accelerator", "result"])
SLA_BREACHES_TOTAL = Counter("cardmix_sla_breaches_total", "SLA breaches compensated")
METER_TICK_SECONDS = Histogram("cardmix_meter_tick_seconds", "Duration of one bulk meter tick",
                               buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30))
WEBHOOK_FAILURES_TOTAL = Counter("cardmix_webhook_failures_total", "Stripe webhook deliveries refused or failed",
                                 ["reason"])
TASK_FAILURES_TOTAL = Counter("cardmix_task_failures_total", "Celery task failures", ["task"])
