"""Leave room on each page of the tables every tick updates (meters, accounts), so PostgreSQL can update
their rows in place (HOT: no new index entries) instead of writing every index again each minute."""
from django.db import migrations

TABLES = ("billing_meter", "billing_account")


def fillfactor(value):
    return [f"ALTER TABLE {table} SET (fillfactor = {value})" for table in TABLES]


class Migration(migrations.Migration):
    dependencies = [("billing", "0006_drop_redundant_fk_indexes")]
    operations = [migrations.RunSQL(fillfactor(70), fillfactor(100))]
