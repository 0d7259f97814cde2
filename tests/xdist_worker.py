"""Loaded with `-p` (pyproject's addopts), before pytest-django reads the settings: under pytest-xdist
each worker is a test run of its own, so it gets its own cache namespace and var folder. (Its
database and Celery queue names already carry its pid; pytest-django suffixes the database too.)"""
import os

_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:
    os.environ["CACHE_KEY_PREFIX"] = f"{os.environ.get('CACHE_KEY_PREFIX', 'cardmix-test')}-{_worker}"
    if os.environ.get("CARDMIX_VAR_DIR"):
        os.environ["CARDMIX_VAR_DIR"] = os.path.join(os.environ["CARDMIX_VAR_DIR"], _worker)
