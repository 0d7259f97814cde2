"""Leave room on meter and account pages so the per-tick updates stay HOT (no index churn)."""
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("billing", "0004_products")]

    operations = [migrations.RunSQL(
        ["ALTER TABLE billing_meter SET (fillfactor = 70)", "ALTER TABLE billing_account SET (fillfactor = 70)"],
        ["ALTER TABLE billing_meter RESET (fillfactor)", "ALTER TABLE billing_account RESET (fillfactor)"])]
