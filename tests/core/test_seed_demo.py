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


def test_the_beat_tick_runs_on_the_embedded_sqlite(tmp_path):
    """`make run`'s embedded database: after migrate and seed_demo on SQLite, the beat's meter tick and its funds
    watch run. The watch's set-based query is PostgreSQL SQL (arrays); SQLite takes the ORM path — before, every
    tick of `make run` failed there and the demo was never billed."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite3'}", CARDMIX_VAR_DIR=str(tmp_path),
               DJANGO_SETTINGS_MODULE="config.settings")
    script = ("import django; django.setup()\n"
              "from django.core.management import call_command\n"
              "call_command('migrate', verbosity=0); call_command('seed_demo', verbosity=0)\n"
              "from billing.tick import meter_tick\n"
              "from billing.watch import funds_watch_open\n"
              "print('watch', funds_watch_open()); meter_tick(); print('tick ok')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "watch {'stopped': [], 'warned': []}" in done.stdout and "tick ok" in done.stdout, done.stdout
