"""Platform accounts with their fixed negative ids, and a trigger refusing UPDATE/DELETE of transfers."""
from django.db import migrations

PLATFORM_IDS = {"payments_clearing": -1, "compute_revenue": -2, "promotions": -3, "expired_credit": -4,
                "rounding": -5}

TRIGGER = """
CREATE OR REPLACE FUNCTION billing_transfer_immutable() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'billing_transfer rows are immutable (post a correcting transfer)';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER billing_transfer_immutable BEFORE UPDATE OR DELETE ON billing_transfer
  FOR EACH ROW EXECUTE FUNCTION billing_transfer_immutable();
"""
UNTRIGGER = """
DROP TRIGGER IF EXISTS billing_transfer_immutable ON billing_transfer;
DROP FUNCTION IF EXISTS billing_transfer_immutable();
"""


def create_platform_accounts(apps, schema_editor):
    Account = apps.get_model("billing", "Account")
    Account.objects.bulk_create([Account(id=i, organization=None, kind=k) for k, i in PLATFORM_IDS.items()],
                                ignore_conflicts=True)


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [
        migrations.RunPython(create_platform_accounts, migrations.RunPython.noop),
        migrations.RunSQL([TRIGGER], [UNTRIGGER]),  # in lists: each script sent whole, not split at semicolons
    ]
