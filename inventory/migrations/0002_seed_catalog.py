"""Seed the SPEC §1 catalog: accelerators, their list prices and the images."""
from django.db import migrations


def forwards(apps, schema_editor):
    from inventory.catalog_seed import seed_catalog

    seed_catalog(apps)


class Migration(migrations.Migration):

    dependencies = [("inventory", "0001_initial")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
