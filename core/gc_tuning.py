"""The web processes' garbage collector, set for serving requests.

CPython's cyclic collector runs a young collection every 700 net allocations and now and then a full one over every
object of the process: Django's modules, classes and URL patterns, ~175k objects that live as long as the process.
An instance list page (100 bodies, ~20k short-lived containers) paid about a fifth of its CPU for collections
that found nothing of the app to free (docs/performance/README.md). Here the objects of start-up are frozen (never
traversed again) and the young generation is collected every GC_GEN0_THRESHOLD allocations instead.
"""
import gc

from django.conf import settings


def tune_for_requests() -> None:
    """Load what every request needs, freeze it, and raise the young generation's threshold. Call once per process,
    after the application is built (config.asgi, config.wsgi)."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018  every view module imported now, so frozen with the rest
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(settings.GC_GEN0_THRESHOLD, gen1, gen2)
