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
    assert response.json() == {"status": "ok", "database": "ok", "broker": "ok"}


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
