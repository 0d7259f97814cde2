"""Health check, production settings, and the OpenAPI schema's validity."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_healthz_reports_database_and_broker(client):
    response = client.get("/healthz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok", "database": "ok", "broker": "ok",
                               "database_engine": f"PostgreSQL {_server_major()} (DATABASE_URL)"}


def _server_major() -> int:
    from django.db import connection

    return connection.connection.info.server_version // 10000


def test_production_refuses_to_start_without_database_url():
    result = _manage("check", env_extra={"CARDMIX_ENV": "production", "SECRET_KEY": "x" * 50, "DATABASE_URL": ""})
    assert result.returncode != 0
    assert "needs DATABASE_URL" in result.stderr


def test_settings_refuse_a_database_that_is_not_postgresql():
    result = _manage("check", env_extra={"DATABASE_URL": "sqlite:///var/x.sqlite3"})
    assert result.returncode != 0
    assert "must name a PostgreSQL database" in result.stderr


def _manage(*args, env_extra):
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DJANGO_SETTINGS_MODULE")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_production_refuses_to_start_without_secret_key():
    result = _manage("check", env_extra={"CARDMIX_ENV": "production"})
    assert result.returncode != 0
    assert "needs SECRET_KEY" in result.stderr


def test_production_passes_check_deploy():
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env_extra={
        "CARDMIX_ENV": "production", "SECRET_KEY": "x" * 30 + "Production-Secret-Key-For-Tests-1234567890",
        "ALLOWED_HOSTS": "cardmix.example.com"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_openapi_schema_validates():
    result = _manage("spectacular", "--validate", "--fail-on-warn", "--file", os.devnull, env_extra={})
    assert result.returncode == 0, result.stdout + result.stderr


def test_filesystem_broker_keeps_every_folder_under_var(tmp_path):
    """`make run`'s broker (no REDIS_URL) writes only under CARDMIX_VAR_DIR/broker, whatever the cwd:
    kombu's exchange tables default to ./control, which once landed in the repository root."""
    var, cwd = tmp_path / "var", tmp_path / "cwd"
    cwd.mkdir()
    script = ("import django; django.setup(); from config.celery import app; "
              "app.send_task('core.worker_heartbeat'); print('sent')")
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update({"CARDMIX_VAR_DIR": str(var), "REDIS_URL": "", "PYTHONPATH": str(ROOT),
                "DJANGO_SETTINGS_MODULE": "config.settings"})
    result = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "sent" in result.stdout, result.stdout + result.stderr
    assert list(cwd.iterdir()) == []
    assert any((var / "broker" / "control").glob("*.exchange"))
    assert any((var / "broker" / "in").iterdir())
