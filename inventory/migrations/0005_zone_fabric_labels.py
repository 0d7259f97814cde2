"""Fabric labels read the same everywhere: the choices' labels ("InfiniBand", "RoCE v2"), and the demo zones lose
the fabric their names repeated ("East China 1a (InfiniBand NDR 400G)" beside "Infiniband 400 Gb/s")."""
from django.db import migrations, models

# Names seed_demo_fleet gave before; an operator's own names are left alone.
OLD_DEMO_NAMES = {"cn-east-1a": ("East China 1a (InfiniBand NDR 400G)", "East China 1a"),
                  "cn-east-1b": ("East China 1b (RoCE v2 200G)", "East China 1b")}


def rename_demo_zones(apps, schema_editor):
    Zone = apps.get_model("inventory", "Zone")
    for slug, (old, new) in OLD_DEMO_NAMES.items():
        Zone.objects.filter(slug=slug, name=old).update(name=new)


def restore_demo_zones(apps, schema_editor):
    Zone = apps.get_model("inventory", "Zone")
    for slug, (old, new) in OLD_DEMO_NAMES.items():
        Zone.objects.filter(slug=slug, name=new).update(name=old)


class Migration(migrations.Migration):

    dependencies = [
        ("inventory", "0004_node_clean_claim"),
    ]

    operations = [
        migrations.AlterField(
            model_name="zone",
            name="fabric_kind",
            field=models.CharField(choices=[("infiniband", "InfiniBand"), ("roce", "RoCE v2")], default="roce",
                                   max_length=12),
        ),
        migrations.RunPython(rename_demo_zones, restore_demo_zones),
    ]
