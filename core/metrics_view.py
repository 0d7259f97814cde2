"""/metrics: Prometheus exposition for staff sessions or the METRICS_TOKEN bearer."""
import hmac

from django.conf import settings
from django.http import HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily

_collectors = []


def register_scrape_collector(fn):
    """fn() -> iterable of prometheus metric families, computed at scrape time (e.g. from the database)."""
    _collectors.append(fn)
    return fn


class _ScrapeCollector:
    def collect(self):
        for fn in _collectors:
            yield from fn()


@register_scrape_collector
def _queue_length():
    family = GaugeMetricFamily("cardmix_celery_queue_length", "Tasks waiting in the broker queue", labels=["queue"])
    if settings.REDIS_URL:
        try:
            import redis

            client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1)
            queue = settings.CELERY_TASK_DEFAULT_QUEUE
            family.add_metric([queue], client.llen(queue))
        except Exception:  # a scrape must not fail because the broker is down
            pass
    yield family


@register_scrape_collector
def _instances_by_state():
    """Instances per state, one GROUP BY at scrape time (the model is looked up lazily: core imports no app)."""
    from django.apps import apps
    from django.db.models import Count

    family = GaugeMetricFamily("cardmix_instances", "Instances by state", labels=["state"])
    try:
        model = apps.get_model("provisioning", "Instance")
        counts = dict(model.objects.order_by().values_list("state").annotate(n=Count("pk")))
        states = [value for value, _ in model._meta.get_field("state").choices]
    except Exception:  # a scrape must not fail because the database is away
        counts, states = {}, []
    for state in states or sorted(counts):
        family.add_metric([state], counts.get(state, 0))
    yield family


def _authorised(request) -> bool:
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and user.is_staff:
        return True
    token = getattr(settings, "METRICS_TOKEN", "")
    header = request.headers.get("Authorization", "")
    return bool(token) and hmac.compare_digest(header, f"Bearer {token}")


def metrics(request):
    """Aggregate every process's samples plus scrape-time gauges."""
    if not _authorised(request):
        return HttpResponse("Forbidden\n", status=403, content_type="text/plain")
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(_ScrapeCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
