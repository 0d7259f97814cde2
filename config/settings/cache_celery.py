"""Celery (broker, queue, worker) and Django's cache: Redis when REDIS_URL names one, else no server at all."""
from core.settings_registry import section, setting

from .django import VAR_DIR

section("Celery and the cache", "Without `REDIS_URL`, Celery uses kombu's filesystem transport under `var/` (no "
        "server; worker and beat both work) and each process has its own in-memory cache. With it, Redis is the "
        "broker and, in a database of its own, the cache that throttles and lockouts share across processes.")

# --- Broker ---------------------------------------------------------------------------------------------------------
REDIS_URL = setting("REDIS_URL", "url", "", "e.g. `redis://host:6379/0`: the Celery broker, and the cache in the "
                    "next database number", doc_default="empty (filesystem broker)")
BROKER_DIR = VAR_DIR / "broker"
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
else:
    for sub in ("in", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "in"),
        "data_folder_out": str(BROKER_DIR / "in"),
        "processed_folder": str(BROKER_DIR / "processed"),
        # Exchange tables (kombu ≥ 5.3); its default is ./control, in whatever the cwd is.
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# --- Tasks and workers (the periodic ones are in beat.py) -----------------------------------------------------------
CELERY_TASK_DEFAULT_QUEUE = setting("CARDMIX_TASK_QUEUE", "str", "cardmix",
                                    "the Celery queue Cardmix's tasks go to and its workers consume")
CELERY_TASK_ALWAYS_EAGER = setting("CELERY_TASK_ALWAYS_EAGER", "bool", False,
                                   "run tasks inline in the caller instead of on a worker (some tests)")
WORKER_CONCURRENCY = setting("WORKER_CONCURRENCY", "int", 2, "the worker processes `make run` starts")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"

# --- Cache: Redis when configured (throttles and lockouts must be shared by every process) --------------------------
_cache_url = setting("CACHE_REDIS_URL", "url", "",
                     "the cache's Redis, when it must not be `REDIS_URL`'s next database", doc_default="empty")
_cache_key_prefix = setting("CACHE_KEY_PREFIX", "str", "cardmix",
                            "prefix of every cache key in Redis (several installations, or test runs, may share one)")
if REDIS_URL:
    # Its own Redis database: cache.clear() must never flush the broker's queues.
    if not _cache_url:
        _base, _, _db = REDIS_URL.rpartition("/")
        _cache_url = f"{_base}/{int(_db) + 1}" if _db.isdigit() else REDIS_URL.rstrip("/") + "/1"
    # core.cache: Django's RedisCache with one connection pool per process (Django's own opens one per request
    # under ASGI).
    CACHES = {"default": {"BACKEND": "core.cache.SharedPoolRedisCache", "LOCATION": _cache_url,
                          "KEY_PREFIX": _cache_key_prefix}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
