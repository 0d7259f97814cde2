"""Provisioning's gauges computed at scrape time for /metrics (core/metrics_view.py): the warm pools."""
from prometheus_client.core import GaugeMetricFamily

from core.metrics_view import register_scrape_collector

from .choices import RefillState


@register_scrape_collector
def warm_pools():
    """Per zone and accelerator: the pool's size, nodes warm now, the oldest check's age and the refill state."""
    from .services.warm_pool import warm_pool_rows

    labels = ["zone", "accelerator"]
    size = GaugeMetricFamily("cardmix_warm_pool_size", "Whole nodes the warm pool should keep", labels=labels)
    warm = GaugeMetricFamily("cardmix_warm_pool_warm_nodes", "Warm nodes whose readiness check is fresh",
                             labels=labels)
    age = GaugeMetricFamily("cardmix_warm_pool_check_age_seconds",
                            "Age of the oldest fresh readiness check among the warm nodes", labels=labels)
    state = GaugeMetricFamily("cardmix_warm_pool_refill_state", "1 for the pool's refill state",
                              labels=[*labels, "state"])
    try:
        rows = warm_pool_rows()
    except Exception:  # a scrape must not fail because the database is away
        rows = []
    for pool, count, oldest in rows:
        key = [pool.zone.slug, pool.accelerator.slug]
        size.add_metric(key, pool.size)
        warm.add_metric(key, count)
        if oldest is not None:
            age.add_metric(key, oldest)
        for value in RefillState.values:
            state.add_metric([*key, value], 1 if pool.refill_state == value else 0)
    yield from (size, warm, age, state)
