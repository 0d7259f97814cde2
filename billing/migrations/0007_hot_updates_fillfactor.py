"""Leave room on each page of the tables every tick updates (meters, accounts), so PostgreSQL can update
their rows in place (HOT: no new index entries) instead of writing every index again each minute."""
from django.db import migrations

TABLES = ("billing_meter", "billing_account")


def fillfactor(value):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for table in TABLES:
            schema_editor.execute(f"ALTER TABLE {table} SET (fillfactor = {value})")
    return apply


class Migration(migrations.Migration):
    dependencies = [("billing", "0006_drop_redundant_fk_indexes")]
    operations = [migrations.RunPython(fillfactor(70), fillfactor(100))]
