"""Celery task failures: logged with context and counted (observability, not business logic)."""
import logging

from celery.signals import task_failure

from .metrics import TASK_FAILURES_TOTAL

logger = logging.getLogger("cardmix.tasks")


@task_failure.connect
def _on_task_failure(sender=None, task_id=None, exception=None, args=None, kwargs=None, **_):
    name = getattr(sender, "name", "unknown")
    TASK_FAILURES_TOTAL.labels(task=name).inc()
    logger.error("task failed", extra={"task": name, "task_id": task_id, "task_args": repr(args)[:500],
                                       "task_kwargs": repr(kwargs)[:500], "error": repr(exception)[:500]})
