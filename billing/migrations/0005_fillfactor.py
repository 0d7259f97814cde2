"""PostgreSQL: leave room on meter and account pages so the per-tick updates stay HOT (no index churn)."""
from django.db import migrations


def set_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE billing_meter SET (fillfactor = 70)")
        schema_editor.execute("ALTER TABLE billing_account SET (fillfactor = 70)")


def reset_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE billing_meter RESET (fillfactor)")
        schema_editor.execute("ALTER TABLE billing_account RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("billing", "0004_products")]

    operations = [migrations.RunPython(set_fillfactor, reset_fillfactor)]
