"""A zone's fabric reads the same wherever it shows ("InfiniBand 400 Gb/s"), in the demo seed and
after the data migration, not "Infiniband 400 Gb/s" beside "InfiniBand NDR 400G"."""
import importlib
import re

import pytest
from django.apps import apps

from inventory.management.commands.seed_demo_fleet import seed_demo_fleet
from inventory.models import Zone
from tests.console.conftest import login_client
from tests.factories.provisioning import funded

pytestmark = pytest.mark.django_db


def test_the_create_forms_zones_name_the_fabric_once_and_alike(member_factory):
    seed_demo_fleet()
    owner = funded(member_factory(role="owner"))
    page = login_client(owner).get("/instances/new/").content.decode()
    options = dict(re.findall(r'<option value="(cn-east-1[ab])"[^>]*>([^<]+)</option>', page))
    free = r"free: \d+ × [^,]+(, \d+ × [^,]+)*"  # per accelerator (tests/console/test_instances.py)
    assert re.fullmatch(rf"East China 1a · InfiniBand 400 Gb/s · {free}", options["cn-east-1a"]), options
    assert re.fullmatch(rf"East China 1b · RoCE v2 200 Gb/s · {free}", options["cn-east-1b"]), options
    assert "Infiniband" not in page and "NDR 400G" not in page


def test_the_data_migration_renames_the_old_demo_zones_only():
    migration = importlib.import_module("inventory.migrations.0005_zone_fabric_labels")
    old = Zone.objects.create(slug="cn-east-1a", name="East China 1a (InfiniBand NDR 400G)",
                              fabric_kind="infiniband", fabric_gbps=400)
    own = Zone.objects.create(slug="cn-east-1b", name="Our RoCE hall", fabric_kind="roce", fabric_gbps=200)
    migration.rename_demo_zones(apps, None)
    old.refresh_from_db()
    own.refresh_from_db()
    assert old.name == "East China 1a" and own.name == "Our RoCE hall"
    assert old.fabric_label == "InfiniBand 400 Gb/s" and own.fabric_label == "RoCE v2 200 Gb/s"
