"""`make run` seeds a demo login, the fleet and two instances through the real services."""
import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_seed_demo_is_complete_and_idempotent(catalog):
    from billing.selectors import balance_summary
    from provisioning.models import Instance
    from tenancy.models import User

    call_command("seed_demo")
    call_command("seed_demo")  # a second run adds nothing
    demo = User.objects.get(email="demo@cardmix.local")
    assert demo.email_verified_at is not None
    assert User.objects.get(email="admin@cardmix.local").is_staff
    org = demo.organizations.get()
    instances = Instance.objects.filter(organization=org)
    assert sorted(instances.values_list("name", flat=True)) == ["demo-h100x2", "demo-hybrid"]
    assert all(i.state == "provisioning" for i in instances)  # placed; the worker takes them on
    balance = balance_summary(org=org)
    assert balance["trial"] == 10_000_000 and balance["grant"] == 500_000_000


@pytest.mark.timeout(600)
def test_make_run_bills_the_demo_fleet_on_its_embedded_postgresql(tmp_path):
    """`make run`'s path with no DATABASE_URL: its own embedded PostgreSQL (dbserver start, migrate, seed_demo),
    /healthz names it, the demo instances reach running, and the beat's set-based tick charges them — one
    aggregated transfer per organization (SPEC §4 Charging) with a detail row per meter."""
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL", "CARDMIX_"))}
    env.update(CARDMIX_VAR_DIR=str(tmp_path / "var"), DJANGO_SETTINGS_MODULE="config.settings")
    script = """
import django, json; django.setup()
from datetime import timedelta
from django.core.management import call_command
from django.test import Client
call_command("migrate", verbosity=0); call_command("seed_demo", verbosity=0)
from billing.models import MeterCharge, Transfer
from billing.tick import meter_tick
from core.dbclock import db_now
from provisioning.models import Instance
from provisioning.tasks import instance_advance
states = sorted(instance_advance(str(pk)) for pk in Instance.objects.values_list("pk", flat=True))
health = Client().get("/healthz").json()
tick = meter_tick(now=db_now() + timedelta(minutes=1))
print(json.dumps({"states": states, "health": health, "tick": tick,
                  "keys": list(Transfer.objects.filter(code="meter").values_list("key", flat=True)),
                  "charges": MeterCharge.objects.count()}))
"""
    manage = [sys.executable, "manage.py", "dbserver"]
    try:
        started = subprocess.run([*manage, "start"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr[-3000:]
        done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=540)
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        subprocess.run([*manage, "stop"], cwd=ROOT, env=env, capture_output=True, timeout=60)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["health"]["database_engine"].startswith("PostgreSQL ") and "(embedded)" in out["health"]["database_engine"]
    assert out["states"] == ["running", "running"]
    assert out["tick"]["transfers"] >= 1 and out["tick"]["charged"] > 0, out["tick"]
    assert out["keys"] and all(k.startswith("tick:") for k in out["keys"]), out["keys"]  # the set-based tick's keys
    assert out["charges"] == out["tick"]["charges"] > 0
