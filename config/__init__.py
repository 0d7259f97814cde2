"""Cardmix project configuration; importing it loads the Celery app so shared_task binds to it."""
import os
from pathlib import Path

# prometheus_client reads this at import: every process (web workers, Celery) writes its metrics
# to files here and /metrics aggregates them (multiprocess mode).
_var = Path(os.environ.get("CARDMIX_VAR_DIR", Path(__file__).resolve().parent.parent / "var"))
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(_var / "prometheus"))
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)

from .celery import app as celery_app  # noqa: E402

__all__ = ["celery_app"]
