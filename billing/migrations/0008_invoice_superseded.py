"""Invoices may be superseded: a newer month's invoice includes the older open ones' unpaid debt."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("billing", "0007_hot_updates_fillfactor"),
    ]

    operations = [
        migrations.AlterField(
            model_name="invoice",
            name="state",
            field=models.CharField(choices=[("open", "Open"), ("paid", "Paid"), ("superseded", "Superseded")],
                                   default="open", max_length=10),
        ),
    ]
